#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "core/files.h"

namespace ringstep {

void check_creatable(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string what = "run directory '" + excerpt(path) + "'";
  for (const fs::path& name : fs::path(path)) {
    if (name.native().size() > NAME_MAX) {
      throw InputError(what + " cannot be created: the name '" + excerpt(name.native()) +
                       "' is more than the " + std::to_string(NAME_MAX) + " bytes a name may have");
    }
  }
  fs::path existing = path;
  while (!existing.empty() && !input_exists(existing.string(), "run directory")) {
    existing = existing.parent_path();
  }
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing)) {
    throw InputError(what + " cannot be created: '" + existing.string() + "' is not a directory");
  }
  // A real attempt, not access(): root passes access() on read-only and special file
  // systems (/proc) where nothing can be created.
  const fs::path probe = existing / (".ringstep-probe-" + std::to_string(::getpid()));
  if (::mkdir(probe.c_str(), 0700) != 0) {
    throw InputError(what + " cannot be created: nothing can be created in '" + existing.string() +
                     "': " + std::strerror(errno));
  }
  ::rmdir(probe.c_str());
}

namespace {

// The lines of steps.jsonl at PATH whose integer step is at most LAST_STEP; a line that does
// not parse or has no integer step (the torn end of a run that died while writing, or a
// damaged record) is dropped.
std::vector<std::string> steps_through(const std::string& path, int last_step) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> kept;
  while (std::getline(in, line)) {
    const auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_object() && rec.contains("step") && rec["step"].is_number_integer() &&
        rec["step"].get<int64_t>() <= last_step)
      kept.push_back(line);
  }
  return kept;
}

}  // namespace

void RunDir::clear_earlier_run() const {
  for (const char* name : kRunOutputs) {
    std::error_code ec;
    std::filesystem::remove_all(path(name), ec);
    if (ec) throw io_fault("remove the earlier run's", path(name), ec.value());
  }
}

RunDir::~RunDir() {
  if (steps_fd_ >= 0) ::close(steps_fd_);
}

std::vector<std::string> RunDir::create(int resumed_step) {
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) throw io_fault("create the run directory", root_, ec.value());
  const std::string steps = path("steps.jsonl");
  std::vector<std::string> kept;
  if (resumed_step > 0) kept = steps_through(steps, resumed_step);
  std::string text;
  for (const std::string& line : kept) text += line + "\n";
  write_file_atomic(steps, text);
  steps_fd_ = ::open(steps.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (steps_fd_ < 0) throw io_fault("open", steps, errno);
  return kept;
}

void RunDir::append_step(const std::string& json_line) {
  const std::string steps = path("steps.jsonl");
  // A file removed (or its directory) while the run goes on would swallow every later line.
  struct stat st {};
  if (::fstat(steps_fd_, &st) != 0) throw io_fault("stat", steps, errno);
  if (st.st_nlink == 0)
    throw SystemFault("'" + steps + "' was removed while the run was going; the records of " +
                      "the steps since then are lost");
  // One write of the whole line, so a reader (report, tail -f) sees whole lines; a line the
  // disk could not take in full is cut off again.
  try {
    write_all(steps_fd_, json_line + "\n", steps);
  } catch (const SystemFault&) {
    [[maybe_unused]] const int rc = ::ftruncate(steps_fd_, st.st_size);  // the fault is the news
    throw;
  }
}

}  // namespace ringstep
