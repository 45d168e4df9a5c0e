#include "train/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/gpt.h"
#include "train/report_fixture.h"
#include "train/run_summary.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

using namespace ringstep::testing;

TEST(Report, HealthyFixtureHandComputedNumbers) {
  const ReportData r = analyze((kFixtures / "healthy").string(), BigMachine());
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.steps, 20);
  EXPECT_EQ(r.warmup_excluded, 2);
  EXPECT_EQ(r.steady_steps, 18);
  EXPECT_EQ(r.first_steady_step, 3);
  EXPECT_EQ(r.last_step, 20);
  EXPECT_EQ(r.world, 1);
  EXPECT_EQ(r.threads, 1);
  // 100..117 ms: numpy-style percentiles at positions 8.5, 15.3 and 16.83.
  EXPECT_NEAR(r.step_ms_p50, 108.5, kEps);
  EXPECT_NEAR(r.step_ms_p90, 115.3, kEps);
  EXPECT_NEAR(r.step_ms_p99, 116.83, kEps);
  EXPECT_NEAR(r.spread, 6.8 / 108.5, kEps);
  EXPECT_NEAR(r.pct.data, 1, kEps);
  EXPECT_NEAR(r.pct.forward, 30, kEps);
  EXPECT_NEAR(r.pct.backward, 60, kEps);
  EXPECT_NEAR(r.pct.recompute_of_backward, 0, kEps);
  EXPECT_NEAR(r.pct.optimizer, 8, kEps);
  EXPECT_NEAR(r.pct.comm_exposed, 0, kEps);
  EXPECT_NEAR(r.pct.other, 1, kEps);
  EXPECT_NEAR(r.pct.compute, 98, kEps);
  EXPECT_TRUE(std::isnan(r.overlap));  // nothing communicated
  EXPECT_NEAR(r.tokens_per_s, 2048 / 0.1085, 1e-6);
  EXPECT_NEAR(r.model_gflops, 50, 1e-9);  // 5.425 GFLOP in 108.5 ms
  EXPECT_NEAR(r.peak_gflops, 100, kEps);
  EXPECT_NEAR(r.mfu, 0.5, 1e-11);
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_NEAR(r.final_val_loss, 2.6, kEps);
  EXPECT_NEAR(r.loss_gap, 1.1, kEps);
  EXPECT_EQ(r.slowest_rank, -1);
  EXPECT_EQ(r.activations_peak_bytes, uint64_t(50 * kMiB));
  // fp32 on the CPU: the spec's arena peak is the one the model counts for its micro-batch.
  EXPECT_EQ(r.activations_estimate_bytes,
            double(Gpt(r.config.model, gpt_options(r.config)).count_arena_bytes(8, 128)));
  EXPECT_TRUE(r.findings.empty()) << report_text(r);
}

TEST(Report, StragglerFixtureHandComputedNumbers) {
  const ReportData r = analyze((kFixtures / "straggler").string(), BigMachine());
  EXPECT_EQ(r.steps, 10);
  EXPECT_EQ(r.warmup_excluded, 1);
  EXPECT_EQ(r.world, 4);
  EXPECT_NEAR(r.step_ms_p50, 200, kEps);
  EXPECT_NEAR(r.step_ms_p99, 200, kEps);
  EXPECT_NEAR(r.spread, 0, kEps);
  EXPECT_NEAR(r.pct.data, 1, kEps);
  EXPECT_NEAR(r.pct.forward, 20, kEps);
  EXPECT_NEAR(r.pct.backward, 30, kEps);
  EXPECT_NEAR(r.pct.recompute, 7.5, kEps);
  EXPECT_NEAR(r.pct.recompute_of_backward, 25, kEps);
  EXPECT_NEAR(r.pct.optimizer, 4, kEps);
  EXPECT_NEAR(r.pct.comm_exposed, 44, kEps);
  EXPECT_NEAR(r.pct.other, 1, kEps);
  EXPECT_NEAR(r.pct.comm, 55, kEps);
  EXPECT_NEAR(r.pct.compute, 54, kEps);
  EXPECT_NEAR(r.overlap, 0.2, kEps);  // 1 - 88/110
  EXPECT_NEAR(r.tokens_per_s, 40960, kEps);
  EXPECT_NEAR(r.mfu, 0.3, kEps);
  // The warm-up step (rank 0 slowest) does not count.
  EXPECT_EQ(r.slowest_count, (std::vector<int>{0, 2, 0, 7}));
  EXPECT_EQ(r.slowest_rank, 3);
  EXPECT_NEAR(r.slowest_frac, 7.0 / 9, kEps);
  EXPECT_NEAR(r.max_over_median, 200.0 / 180, kEps);
  // fp16 and full recompute: the spec's peak, at most the counted one (which adds the
  // 16-bit path's scratch).
  const GptSpec spec(r.config.model);
  EXPECT_EQ(r.activations_estimate_bytes,
            spec.activations(gpt_options(r.config), Device::cpu, 8, 128).peak);
  EXPECT_LE(r.activations_estimate_bytes,
            double(Gpt(r.config.model, gpt_options(r.config)).count_arena_bytes(8, 128)));
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_NEAR(r.skipped_pct, 10, kEps);
  EXPECT_TRUE(std::isnan(r.entropy_floor));
  EXPECT_TRUE(std::isnan(r.loss_gap));
  // Communication, the straggler and the loss scale; not the kernels (compute is 54%).
  EXPECT_EQ(r.fired(), (std::vector<std::string>{"comm_exposed", "straggler", "loss_scale"}));
  const std::string text = report_text(r);
  EXPECT_NE(text.find("exposed communication 44.0% of step > 30%"), std::string::npos) << text;
  EXPECT_NE(text.find("onebit_adam"), std::string::npos);
  EXPECT_NE(text.find("rank 3 was the slowest in 7 of 9 steady steps"), std::string::npos);
  EXPECT_NE(text.find("1 of 10 steps skipped (10.0%)"), std::string::npos);
}

TEST(Report, RooflineShapesAndBoundsFromConfig) {
  // tiny: micro_batch 8, seq_len 128 (N = 1024), d_model 128, 4 heads of 32, vocab 256.
  const ReportData r = analyze((kFixtures / "healthy").string(), BigMachine());
  ASSERT_TRUE(r.has_config);
  EXPECT_EQ(r.roofline_rows, 1024);
  EXPECT_NEAR(r.machine_balance, 20, kEps);
  ASSERT_EQ(r.roofline.size(), 7u);
  const RooflineRow& qkv = r.roofline[0];
  EXPECT_EQ(qkv.name, "qkv");
  EXPECT_EQ((std::vector<int64_t>{qkv.m, qkv.k, qkv.n, qkv.count}),
            (std::vector<int64_t>{1024, 128, 384, 4}));
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 1024 * 128 * 384);
  EXPECT_DOUBLE_EQ(qkv.bytes, 4.0 * (1024 * 128 + 128 * 384 + 1024 * 384));
  EXPECT_EQ(qkv.bound, "compute");  // 43.9 FLOP/byte > 20
  EXPECT_DOUBLE_EQ(qkv.attainable_gflops, 100);
  const RooflineRow& qk = r.roofline[5];
  EXPECT_EQ(qk.name, "attn QK^T");
  EXPECT_EQ((std::vector<int64_t>{qk.m, qk.k, qk.n, qk.count}),
            (std::vector<int64_t>{128, 32, 128, 8 * 4 * 4}));
  EXPECT_DOUBLE_EQ(qk.intensity, 1048576.0 / 98304.0);  // 10.7 FLOP/byte < 20
  EXPECT_EQ(qk.bound, "bandwidth");
  EXPECT_DOUBLE_EQ(qk.attainable_gflops, 5 * qk.intensity);
  EXPECT_EQ(r.roofline[4].name, "lm head");
  EXPECT_EQ(r.roofline[4].n, 256);
  // No bandwidth measured: no bound claimed.
  EXPECT_EQ(analyze((kFixtures / "healthy").string()).roofline[0].bound, "unknown");
}

TEST(Report, ActivationRuleFiresNearTheMemoryLimit) {
  MachineInfo small = BigMachine();
  small.ram_bytes = 60 * kMiB;  // 50 MiB of activations = 83% > 80%
  const ReportData r = analyze((kFixtures / "healthy").string(), small);
  EXPECT_EQ(r.fired(), std::vector<std::string>{"activation_memory"});
  EXPECT_NE(r.findings[0].evidence.find("83.3%"), std::string::npos) << r.findings[0].evidence;
  // Selective recomputation keeps 25 of tiny's 40 MiB of block activations (metrics.md):
  // 50 MiB x 25/40 = 31 MiB fits under 80% of 60 MiB.
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"recompute.policy=selective"});
  // The limit is per rank: 4 ranks share the node's RAM (100 MiB of 4 x 110 MiB = 91%).
  small.ram_bytes = 4 * 110 * kMiB;
  EXPECT_TRUE(Fired(analyze((kFixtures / "straggler").string(), small), "activation_memory"));
  small.ram_bytes = 4 * 200 * kMiB;
  EXPECT_FALSE(Fired(analyze((kFixtures / "straggler").string(), small), "activation_memory"));
}

TEST(Report, SpreadDataKernelAndSkipRulesFireOnTheirNumbers) {
  const fs::path dir = CopyFixture("healthy", "rules");
  const std::vector<json> healthy = ReadSteps(dir);

  // Steady steps 3..16 at 100 ms, 17..20 at 150 ms: p50 100, p90 150.
  std::vector<json> recs = healthy;
  for (size_t i = 2; i < recs.size(); ++i) {
    const double s = i >= 16 ? 150 : 100;
    json& t = recs[i]["time_ms"];
    t["step"] = s, t["data"] = 0.01 * s, t["forward"] = 0.3 * s, t["backward"] = 0.6 * s;
    t["optimizer"] = 0.08 * s, t["other"] = 0.01 * s;
  }
  WriteSteps(dir, recs);
  ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_NEAR(r.step_ms_p50, 100, kEps);
  EXPECT_NEAR(r.step_ms_p90, 150, kEps);
  EXPECT_TRUE(Fired(r, "step_spread"));
  EXPECT_FALSE(Fired(r, "straggler"));  // one rank

  // Data 6% of every step (taken from forward).
  recs = healthy;
  for (json& rec : recs) {
    json& t = rec["time_ms"];
    const double s = t["step"], data = t["data"], forward = t["forward"];
    t["data"] = 0.06 * s, t["forward"] = forward - (0.06 * s - data);
  }
  WriteSteps(dir, recs);
  r = analyze(dir.string(), BigMachine());
  EXPECT_NEAR(r.pct.data, 6, 1e-6);
  EXPECT_EQ(r.fired(), std::vector<std::string>{"input_pipeline"});

  // One skipped step in 20 (5% > 1%).
  recs = healthy;
  recs[9]["skipped"] = true;
  WriteSteps(dir, recs);
  EXPECT_EQ(analyze(dir.string(), BigMachine()).fired(), std::vector<std::string>{"loss_scale"});

  // A peak twice as high: MFU 25% while compute is 98% of the step.
  WriteSteps(dir, healthy);
  std::ifstream in(dir / "summary.json");
  json summary = json::parse(in);
  in.close();
  summary["peak_gflops"] = 200.0;
  std::ofstream(dir / "summary.json", std::ios::trunc) << summary.dump(2);
  r = analyze(dir.string(), BigMachine());
  EXPECT_NEAR(r.mfu, 0.25, 1e-11);
  EXPECT_EQ(r.fired(), std::vector<std::string>{"kernels"});
  fs::remove_all(dir);
}

TEST(Report, MissingSummaryFallsBackToTheStepRecords) {
  const fs::path dir = CopyFixture("healthy", "nosummary");
  fs::remove(dir / "summary.json");
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("summary.json not found"), std::string::npos);
  EXPECT_NEAR(r.peak_gflops, 100, 1e-9);  // model_gflops / mfu of the records
  EXPECT_NEAR(r.mfu, 0.5, 1e-9);
  EXPECT_NEAR(r.final_loss, 2.65, kEps);
  EXPECT_NEAR(r.final_val_loss, 3.9, kEps);  // the last val_loss in the records
  EXPECT_TRUE(std::isnan(r.entropy_floor));
  EXPECT_TRUE(r.findings.empty());
  fs::remove_all(dir);
}

TEST(Report, PartlyWrittenLastLineIsSkippedWithAWarning) {
  const fs::path dir = CopyFixture("healthy", "truncated");
  AppendRaw(dir / "steps.jsonl", R"({"step":21,"loss":2.5,"lr":0.003,"tokens":20)");
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.steps, 20);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("steps.jsonl:21: skipped a partly written last line"),
            std::string::npos)
      << r.warnings[0];
  EXPECT_NEAR(r.pct.forward, 30, kEps);
  fs::remove_all(dir);
}

TEST(Report, InvalidLineInTheMiddleNamesFileAndLine) {
  const fs::path dir = CopyFixture("healthy", "badline");
  std::vector<json> recs = ReadSteps(dir);
  WriteSteps(dir, {recs.begin(), recs.begin() + 4});
  AppendRaw(dir / "steps.jsonl", "{\"step\": 5, \"loss\": \n");
  AppendRaw(dir / "steps.jsonl", recs[5].dump() + "\n");
  try {
    analyze(dir.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("steps.jsonl:5: invalid step record"), std::string::npos)
        << e.what();
  }
  // A complete record without a required field is an error too, even on the last line.
  recs.back()["time_ms"].erase("forward");
  WriteSteps(dir, recs);
  try {
    analyze(dir.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("steps.jsonl:20: field 'time_ms.forward' is missing"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Report, EmptyStepsFileThrows) {
  const fs::path dir = Scratch("empty");
  fs::create_directories(dir);
  std::ofstream(dir / "steps.jsonl").close();
  EXPECT_THROW(
      {
        try {
          analyze(dir.string());
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("no step records"), std::string::npos);
          throw;
        }
      },
      InputError);
  // Only a partly written line: nothing left either.
  AppendRaw(dir / "steps.jsonl", R"({"step":1,"lo)");
  EXPECT_THROW(analyze(dir.string()), InputError);
  fs::remove_all(dir);
}

TEST(Report, MissingDirectoryOrStepsFileThrowsNamingThePath) {
  const fs::path dir = Scratch("missing");
  try {
    analyze(dir.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
  fs::create_directories(dir);
  try {
    analyze(dir.string());
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "steps.jsonl").string()), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Report, JsonCarriesTheSameNumbers) {
  const ReportData r = analyze((kFixtures / "straggler").string(), BigMachine());
  const json j = json::parse(report_json(r));
  EXPECT_EQ(j["steps"], 10);
  EXPECT_NEAR(double(j["breakdown_pct"]["comm_exposed"]), 44, kEps);
  EXPECT_NEAR(double(j["overlap"]), 0.2, kEps);
  EXPECT_TRUE(j["loss"]["floor"].is_null());
  EXPECT_EQ(j["ranks"]["slowest_rank"], 3);
  EXPECT_EQ(j["roofline"]["products"].size(), 7u);
  ASSERT_EQ(j["diagnosis"].size(), 3u);
  EXPECT_EQ(j["diagnosis"][0]["id"], "comm_exposed");
  EXPECT_FALSE(j["healthy"]);
  const json h = json::parse(report_json(analyze((kFixtures / "healthy").string())));
  EXPECT_TRUE(h["healthy"]);
  EXPECT_TRUE(h["overlap"].is_null());
  EXPECT_TRUE(h["machine"]["mem_bandwidth_gbs"].is_null());
}

// summary.json's compress: auto decision reaches the report as written: the log's line in
// the text, the summary's object (the numbers it compared) in the JSON; null without one.
TEST(Report, ShowsTheSummarysCompressChoice) {
  const fs::path dir = CopyFixture("healthy", "compress_choice");
  std::vector<json> recs = ReadSteps(dir);
  {
    std::ofstream out(dir / "steps.jsonl", std::ios::trunc);
    for (json& rec : recs) {
      rec["stage"] = "warmup";  // a 1-bit Adam run that chose not to compress
      out << rec.dump() << "\n";
    }
  }
  json summary;
  std::ifstream(dir / "summary.json") >> summary;
  const CompressChoice choice{1.5, 60.25, 3200, 100, 5.125, 5};
  summary["compress_choice"] = to_json(choice);
  std::ofstream(dir / "summary.json", std::ios::trunc) << summary.dump(2);
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_TRUE(r.compress_choice.has_value());
  EXPECT_FALSE(r.compress_choice->compress());
  const std::string text = report_text(r);
  EXPECT_NE(text.find(choice.describe()), std::string::npos) << text;
  EXPECT_NE(
      text.find("not compressing (AdamW goes on) from step 5: the fp32 AllReduce left 1.5 ms"),
      std::string::npos)
      << text;
  const json j = json::parse(report_json(r))["onebit"]["compress_choice"];
  EXPECT_EQ(j["compressed"], false);
  EXPECT_EQ(j["from_step"], 5);
  EXPECT_EQ(j["fp32_exposed_ms"], 1.5);
  EXPECT_EQ(j["fp32_comm_ms"], 60.25);
  EXPECT_EQ(j["fp32_sent_bytes"], 3200);
  EXPECT_EQ(j["onebit_sent_bytes"], 100);
  EXPECT_EQ(j["code_ms"], 5.125);
  EXPECT_EQ(j["compressed_exposed_ms"], 0);
  summary.erase("compress_choice");
  std::ofstream(dir / "summary.json", std::ios::trunc) << summary.dump(2);
  const ReportData none = analyze(dir.string(), BigMachine());
  EXPECT_FALSE(none.compress_choice.has_value());
  EXPECT_TRUE(json::parse(report_json(none))["onebit"]["compress_choice"].is_null());
  EXPECT_EQ(report_text(none).find("compress: auto"), std::string::npos);
  fs::remove_all(dir);
}

// One MFU: a real run's last step record, its summary and its report divide by the same
// peak (the start's, measured here, not the end's) with the same formula, and the report
// leaves out the warm-up steps the summary left out.
TEST(Report, MfuOfTheRecordsTheSummaryAndTheReportAgree) {
  const fs::path dir = Scratch("mfu");
  Config cfg = testing::SmallRun(dir.string(), 20);
  cfg.profile.peak_gflops = 0;  // measured, at start and again at the end
  train(cfg, nullptr);
  const std::vector<json> recs = ReadSteps(dir);
  std::ifstream in(dir / "summary.json");
  const RunSummary s = summary_from_json(json::parse(in), "summary.json");
  ASSERT_GT(s.peak_gflops, 0);
  ASSERT_GT(s.peak_gflops_end, 0);
  const StepRecord last = step_record_from_json(recs.back(), "steps.jsonl");
  // The record's and the summary's mfu are their model_gflops over the one peak (to their
  // rounding: model_gflops to 0.001, mfu to 0.0001).
  EXPECT_NEAR(last.mfu, model_flops_utilization(last.model_gflops, s.peak_gflops), 1e-4);
  EXPECT_NEAR(s.mfu, model_flops_utilization(s.model_gflops, s.peak_gflops), 1e-4);
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.peak_gflops, s.peak_gflops);
  EXPECT_EQ(r.peak_gflops_end, s.peak_gflops_end);
  EXPECT_EQ(r.warmup_excluded, s.warmup_steps_excluded);
  EXPECT_NEAR(r.step_ms_p50, s.step_ms_p50, 1e-3);
  EXPECT_NEAR(r.mfu, s.mfu, 0.01 * s.mfu + 1e-4);
  EXPECT_NEAR(r.model_gflops, s.model_gflops, 0.01 * s.model_gflops);
  fs::remove_all(dir);
}

// The text has the comm numbers its JSON has: the bucket count and the records' busbw.
TEST(Report, TextShowsBucketsAndBusBandwidth) {
  const fs::path dir = CopyFixture("straggler", "comm_text");
  std::vector<json> recs = ReadSteps(dir);
  for (json& rec : recs) rec["comm_busbw_gbs"] = 1.25;
  WriteSteps(dir, recs);
  const ReportData r = analyze(dir.string(), BigMachine());
  const json j = json::parse(report_json(r));
  EXPECT_EQ(j["comm"]["buckets"], 1);
  EXPECT_EQ(j["comm"]["busbw_gbs"], 1.25);
  const std::string text = report_text(r);
  EXPECT_NE(text.find("comm         1 bucket of <= 25 MiB (comm.bucket_mb) for 3.21 MiB of "
                      "gradients | bus bandwidth 1.25 GB/s (busbw, median) | exposed 88.0 ms"),
            std::string::npos)
      << text;
  fs::remove_all(dir);
}

TEST(Report, RunReportPrintsOneJsonObject) {
  ::testing::internal::CaptureStdout();
  const int rc = run_report((kFixtures / "straggler").string(), true);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  const json j = json::parse(out);  // the whole of stdout is one object
  EXPECT_GT(double(j["machine"]["mem_bandwidth_gbs"]), 0);
  EXPECT_GT(double(j["memory"]["limit_bytes"]), 0);
  EXPECT_EQ(j["roofline"]["products"][0]["bound"].is_string(), true);
}

// Memory for people (train --dry-run, the report): MiB below a GiB, GiB from one.
TEST(Report, HumanBytesInMibThenGib) {
  EXPECT_EQ(human_bytes(0), "0.00 MiB");
  EXPECT_EQ(human_bytes(52.86 * 1048576), "52.86 MiB");
  EXPECT_EQ(human_bytes(1023.0 * 1048576), "1023.00 MiB");
  EXPECT_EQ(human_bytes(1536.0 * 1048576), "1.50 GiB");
}

}  // namespace
}  // namespace ringstep
