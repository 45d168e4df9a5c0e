// The run directory (docs/design.md "The run directory"): created by rank 0 only after every
// input has been checked; files that are written whole (config.yaml, summary.json) go
// through a temporary file and a rename (core/files.h) so a crash never leaves half of one.
// Every write failure is a SystemFault naming the file and the cause.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace ringstep {

// A finished run's weights, as `ringstep export` writes them (train/export.h).
inline constexpr const char* kFinalWeights = "final.safetensors";

// Everything a run and its tools write into the run directory: what run.overwrite deletes
// before a new run starts. Nothing else there is touched (a data file or the weights a run
// starts from may live beside them).
inline constexpr std::array<const char*, 7> kRunOutputs = {
    "config.yaml", "steps.jsonl", "summary.json", "trace", "checkpoints", kFinalWeights,
    "steps.png",  // tools/plot_steps.py
};

// Throws InputError unless PATH is a directory or could be created as one: every name in it
// at most NAME_MAX bytes, its deepest existing ancestor a writable directory. Reads only, so
// a command calls it before building anything.
void check_creatable(const std::string& path);

class RunDir {
 public:
  explicit RunDir(std::string root) : root_(std::move(root)) {}
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  // Deletes each of kRunOutputs under ROOT that exists. Throws std::runtime_error naming
  // the path that could not be removed.
  void clear_earlier_run() const;
  // Creates ROOT (and parents) and opens steps.jsonl for appending. Records of steps after
  // RESUMED_STEP are dropped (written after the checkpoint that is resumed, they will be
  // written again); 0 = a new run, steps.jsonl starts empty. Returns the records kept, one
  // JSON line each.
  std::vector<std::string> create(int resumed_step);
  const std::string& root() const { return root_; }
  std::string path(const std::string& name) const { return root_ + "/" + name; }
  // Appends one record as one line; a line the disk could not take in full is removed
  // again. SystemFault also when steps.jsonl has been removed since create().
  void append_step(const std::string& json_line);

 private:
  std::string root_;
  int steps_fd_ = -1;
};

}  // namespace ringstep
