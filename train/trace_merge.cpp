#include "train/trace_merge.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

namespace ringstep {
namespace {

using json = nlohmann::ordered_json;
constexpr size_t kMaxTraceBytes = size_t(1) << 30;

// Rank R's trace and its clock sync (ns), checked to be one ringstep wrote.
std::pair<json, int64_t> read_rank_trace(const std::filesystem::path& path, int rank) {
  const std::string where = std::string("'").append(path.string()).append("'");
  json doc = json::parse(read_regular_file(path.string(), kMaxTraceBytes, "trace"), nullptr,
                         /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw InputError(where + " is not a Chrome trace (no traceEvents list)");
  const json& other = doc.value("otherData", json::object());
  if (!other.is_object() || !other.contains("clock_sync_ns") ||
      !other["clock_sync_ns"].is_number_integer() || other.value("rank", -1) != rank)
    throw InputError(where + " lacks otherData.clock_sync_ns and rank " + std::to_string(rank) +
                     ": written by a ringstep older than `trace`, or edited");
  return {std::move(doc), other["clock_sync_ns"].get<int64_t>()};
}

}  // namespace

int merge_traces(const std::string& run_dir, const std::string& output) {
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "trace";
  if (!std::filesystem::exists(dir / "rank-0.json"))
    throw InputError(std::string("'").append((dir / "rank-0.json").string()) +
                     "' not found: the run traced no steps (profile.trace_steps)");
  json events = json::array();
  int64_t sync_0 = 0;
  int ranks = 0;
  for (; std::filesystem::exists(dir / ("rank-" + std::to_string(ranks) + ".json")); ++ranks) {
    auto [doc, sync] = read_rank_trace(dir / ("rank-" + std::to_string(ranks) + ".json"), ranks);
    if (ranks == 0) sync_0 = sync;
    const double shift_us = double(sync_0 - sync) / 1e3;
    for (json& e : doc["traceEvents"]) {
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift_us;
      events.push_back(std::move(e));
    }
  }
  const json merged = {{"traceEvents", events},
                       {"displayTimeUnit", "ms"},
                       {"otherData", {{"ranks", ranks}, {"clock", "rank 0's steady_clock"}}}};
  write_file_atomic(output, merged.dump() + "\n");
  return ranks;
}

}  // namespace ringstep
