#include "core/trace.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "core/files.h"

namespace ringstep {

void TraceRecorder::span(Lane lane, const std::string& name, int64_t start_ns, int64_t end_ns,
                         int step, size_t bytes) {
  spans_.push_back({lane, name, start_ns, end_ns, step, bytes});
}

void TraceRecorder::write(const std::string& path, int rank) const {
  using json = nlohmann::ordered_json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                    {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (int lane = 0; lane < 2; ++lane)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", lane},
                      {"args", {{"name", lane == 0 ? "compute" : "comm"}}}});
  for (const Span& s : spans_) {
    json args = {{"step", s.step}};
    if (s.bytes) args["bytes"] = s.bytes;
    events.push_back({{"name", s.name},
                      {"cat", s.lane == Lane::compute ? "compute" : "comm"},
                      {"ph", "X"},
                      {"pid", rank},
                      {"tid", int(s.lane)},
                      {"ts", double(s.start_ns) / 1e3},
                      {"dur", double(s.end_ns - s.start_ns) / 1e3},
                      {"args", args}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData", {{"rank", rank}, {"clock_sync_ns", clock_sync_ns_}}}};
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw io_fault("create", dir.string(), ec.value());
  write_file_atomic(path, doc.dump() + "\n");
}

}  // namespace ringstep
