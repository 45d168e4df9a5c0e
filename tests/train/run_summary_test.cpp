#include "train/run_summary.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "core/error.h"
#include "optim/loss_scaler.h"
#include "train/run_log.h"
#include "train/small_run.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

RunSummary FullSummary() {
  RunSummary s;
  s.profile_enabled = false;
  s.steps = 40, s.resumed_at_step = 20, s.world = 4, s.threads = 2;
  s.final_loss = 2.5, s.final_val_loss = 2.75, s.entropy_rate = 1.25, s.entropy_floor = 1.5;
  s.skipped_steps = 3, s.optimizer_steps = 37;
  s.precision = DType::f16;
  s.loss_scale_mode = LossScaleMode::dynamic;
  s.loss_scale_final = 32768;
  s.recompute = RecomputePolicy::selective;
  s.stopped_early = "too many skips";
  s.warmup_steps_excluded = 4;
  s.step_ms_p50 = 101.5, s.step_ms_p90 = 120.25;
  s.tokens_per_s = 20480.5, s.model_gflops = 51.25, s.peak_gflops = 128.5;
  s.peak_gflops_end = 140.125, s.mfu = 0.3988;
  s.comm_exposed_frac = 0.125, s.overlap = 0.75;
  s.activations_peak_bytes = 52428800;
  s.checkpoints_saved = 2, s.checkpoint_bytes = 123456789, s.checkpoint_ms_p50 = 12.5;
  s.loop_wall_s = 4.5, s.tokens_per_s_wall = 18000.5;
  return s;
}

RunSummary ReadBack(const std::string& text) {
  return summary_from_json(json::parse(text), "run/summary.json");
}

std::string ReadError(const json& j) {
  try {
    summary_from_json(j, "run/summary.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Writer and reader walk one list of fields: every field survives the round trip.
TEST(RunSummary, EveryFieldRoundTripsThroughJson) {
  const RunSummary a = FullSummary();
  const RunSummary b = ReadBack(summary_text(a));
  EXPECT_EQ(b.format_version, kSummaryFormat);
  EXPECT_EQ(b.profile_enabled, a.profile_enabled);
  EXPECT_EQ((std::vector<int>{b.steps, b.resumed_at_step, b.world, b.threads,
                              b.warmup_steps_excluded, b.checkpoints_saved}),
            (std::vector<int>{40, 20, 4, 2, 4, 2}));
  EXPECT_EQ((std::vector<double>{b.final_loss, b.final_val_loss, b.entropy_rate, b.entropy_floor,
                                 b.loss_scale_final, b.step_ms_p50, b.step_ms_p90, b.tokens_per_s,
                                 b.model_gflops, b.peak_gflops, b.peak_gflops_end, b.mfu,
                                 b.comm_exposed_frac, b.overlap, b.checkpoint_ms_p50, b.loop_wall_s,
                                 b.tokens_per_s_wall}),
            (std::vector<double>{a.final_loss, a.final_val_loss, a.entropy_rate, a.entropy_floor,
                                 a.loss_scale_final, a.step_ms_p50, a.step_ms_p90, a.tokens_per_s,
                                 a.model_gflops, a.peak_gflops, a.peak_gflops_end, a.mfu,
                                 a.comm_exposed_frac, a.overlap, a.checkpoint_ms_p50, a.loop_wall_s,
                                 a.tokens_per_s_wall}));
  EXPECT_EQ(b.skipped_steps, 3);
  EXPECT_EQ(b.optimizer_steps, 37);
  EXPECT_EQ(b.precision, DType::f16);
  EXPECT_EQ(b.loss_scale_mode, LossScaleMode::dynamic);
  EXPECT_EQ(b.recompute, RecomputePolicy::selective);
  EXPECT_EQ(b.stopped_early, std::optional<std::string>("too many skips"));
  EXPECT_EQ(b.activations_peak_bytes, 52428800u);
  EXPECT_EQ(b.checkpoint_bytes, 123456789u);
  // "None" values are null and read back as none.
  RunSummary n = FullSummary();
  n.entropy_rate = n.entropy_floor = n.overlap = n.checkpoint_ms_p50 = RunSummary::kNaN;
  n.stopped_early.reset();
  const json j = json::parse(summary_text(n));
  for (const char* key :
       {"entropy_rate", "entropy_floor", "overlap", "checkpoint_ms_p50", "stopped_early"})
    EXPECT_TRUE(j[key].is_null()) << key;
  const RunSummary m = ReadBack(summary_text(n));
  EXPECT_TRUE(std::isnan(m.overlap));
  EXPECT_FALSE(m.stopped_early);
}

// Each rank's network facts: a list in rank order, unknown values null, absent in a summary
// written before them.
TEST(RunSummary, NetworkFactsRoundTripWithUnknownsAsNull) {
  RunSummary a = FullSummary();
  NetFacts r0;
  r0.interface = "eth0";
  r0.start = {10, 1, 100, 0, 5000, 6000, 0, 0, 0, 0};
  r0.end = {10, 1, 42558, 1658, 62426725, 59441329, 0, 0, 0, 0};
  NetFacts r1 = r0;
  r1.end.cap_gbps = 0.1;
  r1.end.link_gbps = NetSnapshot::kNaN;
  r1.end.rx_errors = -1;
  NetFacts r2;  // no network to the others: every value unknown
  a.network = {r0, r1, r2};
  const json j = json::parse(summary_text(a));
  EXPECT_EQ(j["network"][1]["end"]["cap_gbps"], 0.1);
  EXPECT_TRUE(j["network"][1]["end"]["link_gbps"].is_null());
  EXPECT_TRUE(j["network"][1]["end"]["rx_errors"].is_null());
  EXPECT_EQ(j["network"][2]["interface"], "");
  EXPECT_TRUE(j["network"][2]["start"]["tcp_retrans_segs"].is_null());
  const RunSummary b = ReadBack(summary_text(a));
  ASSERT_EQ(b.network.size(), 3u);
  EXPECT_EQ(b.network[0].interface, "eth0");
  EXPECT_EQ(b.network[0].end.tcp_retrans_segs, 1658);
  EXPECT_EQ(b.network[0].end.tx_bytes, 62426725);
  EXPECT_EQ(b.network[1].end.cap_gbps, 0.1);
  EXPECT_TRUE(std::isnan(b.network[1].end.link_gbps));
  EXPECT_EQ(b.network[1].end.rx_errors, -1);
  EXPECT_EQ(b.network[2].interface, "");
  EXPECT_TRUE(std::isnan(b.network[2].start.cap_gbps));
  // Written before network facts: none.
  json old = j;
  old.erase("network");
  EXPECT_TRUE(summary_from_json(old, "summary.json").network.empty());
  // Damage is named down to the element's field.
  json bad = j;
  bad["network"][1]["end"]["tcp_retrans_segs"] = -5;
  EXPECT_EQ(ReadError(bad),
            "run/summary.json: field 'network[1].end.tcp_retrans_segs' must be an "
            "integer >= 0, got -5");
  bad = j;
  bad["network"] = "eth0";
  EXPECT_EQ(ReadError(bad), "run/summary.json: field 'network' must be a list, got \"eth0\"");
}

// compress: auto's decision: its numbers read back exactly (so the verdict read back is the
// one made), with the verdict and the predicted 1-bit exposed time written beside them;
// null for a run without one, and absent from older summaries.
TEST(RunSummary, CompressChoiceReadsBackAsMade) {
  for (double exposed : {21.9f, 1.5f}) {
    RunSummary a = FullSummary();
    a.compress_choice = CompressChoice{exposed, 60.3f, 4.4e7, 1.4e6, 2.7f, 61};
    const json j = json::parse(summary_text(a))["compress_choice"];
    EXPECT_EQ(j["compressed"], exposed > 2.7f) << j;
    EXPECT_EQ(j["from_step"], 61);
    EXPECT_EQ(j["compressed_exposed_ms"], 0) << "1.9 ms of 1-bit exchange fit in 38.4 hidden";
    const RunSummary b = ReadBack(summary_text(a));
    ASSERT_TRUE(b.compress_choice.has_value());
    const CompressChoice& c = *b.compress_choice;
    EXPECT_EQ((std::vector<double>{c.exposed_ms, c.comm_ms, c.sent_bytes, c.sign_bytes, c.code_ms}),
              (std::vector<double>{exposed, 60.3f, 4.4e7, 1.4e6, 2.7f}));
    EXPECT_EQ(c.from_step, 61);
    EXPECT_EQ(c.describe(), a.compress_choice->describe());
  }
  EXPECT_TRUE(json::parse(summary_text(FullSummary()))["compress_choice"].is_null());
  json old = json::parse(summary_text(FullSummary()));
  old.erase("compress_choice");
  EXPECT_FALSE(summary_from_json(old, "summary.json").compress_choice.has_value());
}

// A summary written before format_version existed reads, each field optional; its MFU is
// recomputed against the start's peak (format 1 divided by the larger of two).
TEST(RunSummary, SummariesWithoutAFormatVersionStillRead) {
  std::ifstream in(std::string(RINGSTEP_SOURCE_DIR) +
                   "/tests/train/fixtures/report_run/healthy/summary.json");
  const RunSummary h = summary_from_json(json::parse(in), "summary.json");
  EXPECT_EQ(h.format_version, 1);
  EXPECT_EQ(h.world, 1);
  EXPECT_EQ(h.peak_gflops, 100);
  EXPECT_TRUE(std::isnan(RunSummary{}.final_loss));
  json v1 = json::parse(summary_text(FullSummary()));
  v1.erase("format_version");
  v1["peak_gflops"] = 140.125;  // format 1: the larger of start and end
  v1["peak_gflops_start"] = 102.5;
  v1.erase("world");
  const RunSummary s = summary_from_json(v1, "summary.json");
  EXPECT_EQ(s.peak_gflops, 102.5);
  EXPECT_DOUBLE_EQ(s.mfu, 51.25 / 102.5);
  EXPECT_EQ(s.world, 0);  // unknown
  // Still checked, field by field.
  v1["threads"] = "two";
  EXPECT_EQ(ReadError(v1),
            "run/summary.json: field 'threads' must be an integer in [1, 1048576], "
            "got \"two\"");
}

TEST(RunSummary, DamagedSummariesNameTheField) {
  const json good = json::parse(summary_text(FullSummary()));
  const auto with = [&](const char* key, const json& v) {
    json j = good;
    j[key] = v;
    return ReadError(j);
  };
  const std::string at = "run/summary.json: ";
  EXPECT_EQ(with("format_version", 3),
            at + "format_version 3 is newer than this ringstep reads (2): report it with the "
                 "ringstep that wrote it");
  EXPECT_EQ(with("world", 0), at + "field 'world' must be an integer in [1, 1048576], got 0");
  EXPECT_EQ(with("world", -3), at + "field 'world' must be an integer in [1, 1048576], got -3");
  EXPECT_EQ(with("threads", 1e9),
            at + "field 'threads' must be an integer in [1, 1048576], got 1000000000.0");
  EXPECT_EQ(with("peak_gflops", -5), at + "field 'peak_gflops' must be >= 0, got -5");
  EXPECT_EQ(with("step_ms_p50", "fast"), at + "field 'step_ms_p50' must be a number, got \"fast\"");
  EXPECT_EQ(with("final_loss", json::array()), at + "field 'final_loss' must be a number, got []");
  EXPECT_EQ(with("mfu", nullptr), at + "field 'mfu' is null; it needs a value");
  EXPECT_EQ(with("precision", "fp8"), at + "field 'precision' is 'fp8'; expected one of fp32, "
                                           "bf16, fp16");
  EXPECT_EQ(with("peak_gflops_start", 100), at + "unknown field 'peak_gflops_start'");
  json j = good;
  j.erase("final_val_loss");
  EXPECT_EQ(ReadError(j), at + "field 'final_val_loss' is missing");
  j["final_val_los"] = 2.5;
  EXPECT_EQ(ReadError(j), at + "field 'final_val_loss' is missing (misspelt as 'final_val_los'?)");
  EXPECT_EQ(ReadError(json::array({1, 2})), at + "expected a JSON object, got [1,2]");
}

// The summary's MFU divides by the start's peak, the one the step records use; the end's
// measurement is written beside it and does not enter MFU.
TEST(RunSummary, MfuDividesByThePeakOfTheRecordsNotTheEndMeasurement) {
  const fs::path dir = fs::temp_directory_path() / ("ringstep_summary_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const Config cfg = testing::SmallRun(dir.string(), 20);
  RunFacts f;
  f.peak_gflops = 100, f.flops_per_token = 5e6, f.tokens_per_step = 2048;
  RunTotals totals;
  for (int i = 0; i < 20; ++i) {
    PhaseTimes t;
    t.step = t.forward = i < 2 ? 300 : 100 + i * i / 7.0;  // sevenths: digits to round away
    totals.add(t);
  }
  totals.steps_run = 20;
  RunEnd end;
  end.peak_gflops_end = 150;  // the machine sped up
  end.loop_s = 2.5;
  const LossScaler scaler(cfg.precision);
  ::testing::internal::CaptureStdout();
  write_summary(cfg, f, totals, scaler, end);
  const std::string done = ::testing::internal::GetCapturedStdout();
  std::ifstream in(dir / "summary.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const RunSummary s = ReadBack(text);
  EXPECT_EQ(s.peak_gflops, 100);
  EXPECT_EQ(s.peak_gflops_end, 150);
  EXPECT_EQ(s.warmup_steps_excluded, 2);
  // The p50 of steps 3..20 lies between i = 10 and 11: 100 + (100 + 121) / 14 ms.
  const double p50 = 100 + 221 / 14.0;
  EXPECT_NEAR(s.step_ms_p50, p50, 5e-4);
  const Throughput t = throughput(2048, p50, 5e6, 1, 100);
  EXPECT_NEAR(s.model_gflops, t.model_gflops, 5e-4);
  EXPECT_NEAR(s.mfu, t.mfu, 5e-5);
  EXPECT_NEAR(s.mfu, model_flops_utilization(s.model_gflops, s.peak_gflops), 1e-4);
  char want[160];
  std::snprintf(want, sizeof want,
                "MFU %.1f%% (peak 100.0 GFLOP/s/rank; measured again at the end: 150.0, +50%%)",
                100 * t.mfu);
  EXPECT_NE(done.find(want), std::string::npos) << want << "\n" << done;
  // Only the files that are there: this directory has no config.yaml or steps.jsonl.
  EXPECT_NE(done.find("wrote " + dir.string() + "/summary.json\n"), std::string::npos) << done;
  // Times to 1 us in the text too.
  EXPECT_NE(text.find("\"step_ms_p50\": 115.786,"), std::string::npos) << text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringstep
