// RUN_DIR/summary.json (docs/logs.md): the end of a run in one object, the one home of its
// schema. One list of fields (run_summary.cpp) serves the writer (train/run_log.cpp, which
// also prints the `done:` line from the same struct) and the reader (`ringstep report`).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/net_facts.h"
#include "core/config.h"
#include "core/dtype.h"
#include "optim/compress_choice.h"

namespace ringstep {

// 2: format_version itself; peak_gflops is the MFU's one peak (profile.peak_gflops or
// measured at start) and peak_gflops_start is gone. A summary without format_version
// (written before) still reads, each field optional, its peak taken from peak_gflops_start.
inline constexpr int kSummaryFormat = 2;

struct RunSummary {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  int format_version = kSummaryFormat;
  bool profile_enabled = true;
  int steps = 0;            // of the whole run, the steps before a resume included
  int resumed_at_step = 0;  // 0: a fresh start
  int world = 0;            // 0: unknown (an older summary without it)
  int threads = 0;          // per rank; 0: unknown
  double final_loss = kNaN, final_val_loss = kNaN;   // NaN: unknown, or not finite (null)
  double entropy_rate = kNaN, entropy_floor = kNaN;  // NaN: not synthetic data (null)
  int64_t skipped_steps = 0, optimizer_steps = 0;
  DType precision = DType::f32;
  LossScaleMode loss_scale_mode = LossScaleMode::none;  // resolved: never auto
  double loss_scale_final = 1;
  RecomputePolicy recompute = RecomputePolicy::none;
  std::optional<std::string> stopped_early;  // why the run stopped early (null: it did not)
  int warmup_steps_excluded = 0;
  double step_ms_p50 = 0, step_ms_p90 = 0;
  double tokens_per_s = 0;     // all ranks, at step_ms_p50
  double model_gflops = 0;     // per rank, at step_ms_p50
  double peak_gflops = 0;      // per rank: the MFU's denominator (0: unknown)
  double peak_gflops_end = 0;  // measured again after the run: information only
  double mfu = 0;
  double comm_exposed_frac = 0;
  double overlap = kNaN;  // NaN: nothing communicated (null)
  uint64_t activations_peak_bytes = 0;
  int checkpoints_saved = 0;
  uint64_t checkpoint_bytes = 0;
  double checkpoint_ms_p50 = kNaN;  // NaN: none saved (null)
  double loop_wall_s = 0;
  double tokens_per_s_wall = 0;
  uint64_t peak_rss_bytes = 0;  // rank 0's peak resident set (getrusage); 0: unknown
  // Every rank's network facts in rank order (comm/net_facts.h); empty with one rank, and in
  // a summary written before they were recorded.
  std::vector<NetFacts> network;
  // compress: auto's decision and the numbers it compared (null: no such decision was made).
  std::optional<CompressChoice> compress_choice;
};

// summary.json's text: pretty-printed, numbers rounded as docs/logs.md says.
std::string summary_text(const RunSummary& s);
nlohmann::ordered_json to_json(const RunSummary& s);
// Reads a summary; WHERE (the file's path) prefixes errors. Throws InputError naming the
// field for a missing field, a wrong type, a value out of range, an unknown key or a
// format_version newer than kSummaryFormat.
RunSummary summary_from_json(const nlohmann::json& j, const std::string& where);

// summary.json's `compress_choice` object (its one list of fields), for the report's JSON.
nlohmann::ordered_json to_json(const CompressChoice& c);

// The names of summary.json's fields, in the order they are written (docs/logs.md's table).
std::vector<std::string> summary_field_names();

}  // namespace ringstep
