// What a run tells its user besides the step records (docs/logs.md): the header before the
// first step, one line every profile.log_every steps, a line when a straggler starts and
// when it ends, and the summary (summary.json and the `done:` lines). Rank 0 calls these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/net_facts.h"
#include "core/config.h"
#include "optim/compress_choice.h"
#include "train/data.h"
#include "train/step_record.h"

namespace ringstep {

class Gpt;
class GptSpec;
class LossScaler;

// Facts fixed for the whole run, measured or derived once at start.
struct RunFacts {
  int rank = 0, world = 1, threads = 1;
  double peak_gflops = 0;         // per rank, at start: MFU's one peak (docs/metrics.md)
  std::string peak_source;        // "from config" or how it was measured
  double flops_per_token = 0;     // model FLOPs (6N + 6LCT)
  double hw_flops_per_token = 0;  // plus the recomputed forward
  int64_t tokens_per_step = 0;    // global
  DataInfo data;                  // entropy rate and floor (NaN: unknown)
  std::string data_description;
  uint64_t param_bytes = 0, optimizer_bytes = 0, arena_bytes = 0;
  uint64_t weight_copy_bytes = 0;  // the backend's copies of the weights (16-bit, widened)
  size_t buckets = 0;
  std::vector<int> trace_window;  // [first, last] clipped to the run, or empty
  std::string trace_note;         // why there is no trace, or ""
  NetFacts network;  // this rank's interface and its start snapshot (more than one rank)
};

// Sums over the profiled steps, for the summary.
// What the summary covers: the whole run, the steps before a resume included.
struct RunTotals {
  std::vector<double> step_ms;  // every profiled step, slowest rank
  double comm_ms = 0, comm_exposed_ms = 0, step_ms_sum = 0;
  int steps_run = 0;      // steps of the whole run
  int resumed_step = 0;   // the step this process resumed at; 0 = a fresh start
  float last_loss = 0;    // the loss of the last step recorded before the resume
  std::vector<double> checkpoint_ms;  // each checkpoint this process saved, write to commit
  uint64_t checkpoint_bytes = 0;      // the files of one checkpoint

  void add(const PhaseTimes& slowest);
  // Starts from the records (steps.jsonl lines) of the steps before RESUMED_STEP.
  void resume(const std::vector<std::string>& records, int resumed_step);
};

// How the run ended, for the summary.
struct RunEnd {
  float final_loss = 0, final_val_loss = 0;
  int64_t optimizer_steps = 0;
  std::string stop_reason;  // "" unless the loss scaler stopped the run
  uint64_t activations_peak_bytes = 0;
  double loop_s = 0;              // wall time of the loop, evaluations included
  double peak_gflops_end = 0;     // measured again after the run: information only
  std::vector<NetFacts> network;  // every rank's, end snapshots included; empty with one rank
  // The optimizer's compress: auto decision, if it made one.
  std::optional<CompressChoice> compress_choice;
};

// The model in one line, as the run header and the dry run show it: "GPT 12 layers, d_model
// 768, 12 heads, seq 1024, vocab 50257 (50304 rows): 124.5M params (124.4M without position
// embeddings and padding)".
std::string model_summary(const GptSpec& spec);
void print_header(const Config& cfg, const RunFacts& facts, const Gpt& model,
                  const LossScaler& scaler);
// Where a run stands at a logged step: the tokens consumed by all ranks, the wall time of this
// process's loop so far, and the rest of the steps at the pace of those it ran.
struct RunProgress {
  int64_t tokens = 0;
  double elapsed_s = 0, eta_s = 0;
};
// One console line for record R of a run of STEPS steps (docs/logs.md "The console").
void print_step_line(const StepRecord& r, int steps, bool show_scale, const RunProgress& progress);
// A checkpoint saved: where, its size and how long it took to commit.
void print_checkpoint_line(const std::string& path, uint64_t bytes, double ms);
// With the profiler off: the loss and lr only.
void print_loss_line(int step, int steps, float loss, double lr, bool applied);
// Writes RUN_DIR/summary.json and prints the `done:` lines.
void write_summary(const Config& cfg, const RunFacts& facts, const RunTotals& totals,
                   const LossScaler& scaler, const RunEnd& end);

// Turns the per-step straggler verdict into two events: when a rank starts straggling and
// when it has been back for kStragglerSteps steps, with how long it lasted. Quiet between.
class StragglerLog {
 public:
  // The line to print at STEP, or "" when nothing changed.
  std::string update(int step, int straggler, double busy_ratio);

 private:
  int rank_ = -1;  // the current straggler
  int since_ = 0;  // the first of the slow steps that named it
  int quiet_ = 0;  // steps in a row without a straggler
};

}  // namespace ringstep
