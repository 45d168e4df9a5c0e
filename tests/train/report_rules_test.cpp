// The cause-based diagnosis rules and the measured roofline, on the hand-made healthy
// fixture changed one cause at a time (the numbers in tests/train/report_fixture.h).
#include <gtest/gtest.h>

#include <iterator>

#include <fstream>

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/profiler.h"
#include "models/gpt.h"
#include "train/grad_sync.h"
#include "train/report.h"
#include "train/report_fixture.h"

namespace ringstep {
namespace {

using namespace ringstep::testing;

// A copy of FIXTURE with CHANGE applied to every record and FROM -> TO in its config.yaml.
fs::path Changed(const std::string& fixture, const std::string& name,
                 const std::function<void(json&)>& change, const std::string& from = "",
                 const std::string& to = "") {
  const fs::path dir = CopyFixture(fixture, name);
  std::vector<json> recs = ReadSteps(dir);
  for (json& r : recs) change(r);
  WriteSteps(dir, recs);
  if (!from.empty()) {
    std::ifstream in(dir / "config.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(dir / "config.yaml", std::ios::trunc) << text;
  }
  return dir;
}

void SetSummary(const fs::path& dir, const char* key, const json& value) {
  std::ifstream in(dir / "summary.json");
  json summary = json::parse(in);
  in.close();
  summary[key] = value;
  std::ofstream(dir / "summary.json", std::ios::trunc) << summary.dump(2);
}

json Op(const char* phase, const char* op, double ms, double flops, double bytes) {
  return {{"phase", phase}, {"op", op},       {"calls", 4},
          {"ms", ms},       {"flops", flops}, {"bytes", bytes}};
}

// Two ranks where each waits EXPOSED ms of a step for COMM ms of communication; the time
// comes out of backward, so the sum rule still holds. The ranks agree on every phase.
std::function<void(json&)> Comm(double comm, double exposed, double busbw = 0) {
  return [=](json& r) {
    json& t = r["time_ms"];
    t["backward"] = double(t["backward"]) - exposed;
    t["comm"] = comm, t["comm_exposed"] = exposed;
    for (size_t f = 1; f < kPhaseFields.size(); ++f) {
      const double ms = t[kPhaseFields[f].name];
      r["ranks"]["phase_ms"][kPhaseFields[f].name] = {{"min", ms}, {"median", ms}, {"max", ms}};
    }
    r["comm_busbw_gbs"] = busbw;
  };
}

// With the machine of BigMachine (peak 100 GFLOP/s, 5 GB/s): qkv needs 10 ms at peak and
// takes 10; attention's 2e8 FLOPs and 1e7 bytes need 2 ms and take 40, 5% of its bound.
TEST(ReportRules, MeasuredRooflineSortsOpsAndNamesTheOneFarBelowItsBound) {
  const fs::path dir = Changed("healthy", "slow_op", [](json& r) {
    r["ops"] = {Op("forward", "qkv", 10, 1e9, 1e7), Op("backward", "attention", 40, 2e8, 1e7)};
  });
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.op_steps, 18);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].op, Op::attention);  // longest first
  EXPECT_EQ(r.ops[0].phase, OpPhase::backward);
  EXPECT_NEAR(r.ops[0].share_pct, 80, kEps);
  EXPECT_NEAR(r.ops[0].bound_ms, 2, kEps);
  EXPECT_NEAR(r.ops[0].bound_frac, 0.05, kEps);
  EXPECT_NEAR(r.ops[0].gflops, 5, kEps);
  EXPECT_NEAR(r.ops[1].bound_frac, 1, kEps);
  EXPECT_EQ(r.ops[1].bound, "compute");
  EXPECT_EQ(r.fired(), std::vector<std::string>{"slow_op"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"precision.dtype=bf16"});
  EXPECT_NE(report_text(r).find("furthest below their bound: backward attention (5.0%"),
            std::string::npos)
      << report_text(r);
  fs::remove_all(dir);
}

TEST(ReportRules, BandwidthBoundStepAdvisesFusionAndBf16) {
  // gelu: 1e8 bytes need 20 ms at 5 GB/s and take 30 (67% of its bound): 75% of the ops.
  const fs::path dir = Changed("healthy", "memory_bound", [](json& r) {
    r["ops"] = {Op("forward", "qkv", 10, 1e9, 1e7), Op("forward", "gelu", 30, 1e7, 1e8)};
  });
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.fired(), std::vector<std::string>{"memory_bound"});
  EXPECT_NE(r.findings[0].evidence.find("75.0%"), std::string::npos) << r.findings[0].evidence;
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"precision.dtype=bf16"});
  fs::remove_all(dir);
}

TEST(ReportRules, NoOverlapWithOneBucketComputesABucketSizeForFourOrMore) {
  // 25 ms of every steady step (~23%) exposed out of 25.5 ms of communication.
  const fs::path dir = Changed("healthy", "bucket", Comm(25.5, 25));
  ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.comm.buckets, 1);
  EXPECT_NEAR(r.comm.exposed_ms, 25, kEps);
  ASSERT_EQ(r.fired(), std::vector<std::string>{"bucket_size"});
  // tiny: 3.21 MiB of gradients in blocks of 0.756 MiB; 0.72 MiB puts each in its own.
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.bucket_mb=0.72"});
  EXPECT_EQ(gradient_buckets(r.config.model, 0.72), 5);

  const fs::path off =
      Changed("healthy", "overlap_off", Comm(25.5, 25), "overlap: true", "overlap: false");
  r = analyze(off.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_overlap_off"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.overlap=true"});
  fs::remove_all(dir);
  fs::remove_all(off);
}

TEST(ReportRules, GoodOverlapComparesTheBusBandwidthWithTheLink) {
  // Overlap 1 - 25/60 = 58%; the emulated 1 Gb/s link carries 0.125 GB/s.
  const fs::path dir =
      Changed("healthy", "link", Comm(60, 25, 0.1), "bandwidth_gbps: 0.0", "bandwidth_gbps: 1.0");
  ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_NE(r.findings[0].evidence.find("= 80% of the emulated link's 0.125 GB/s"),
            std::string::npos)
      << r.findings[0].evidence;
  EXPECT_NE(r.findings[0].advice.find("1-bit Adam"), std::string::npos);
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"optimizer.name=onebit_adam"});
  // With 1-bit Adam already on, what is left is its full-precision warm-up.
  const fs::path onebit = Changed("healthy", "onebit_on", Comm(60, 25, 0.1),
                                  "bandwidth_gbps: 0.0", "bandwidth_gbps: 1.0");
  {
    std::ifstream in(onebit / "config.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = yaml.find("name: adamw");
    ASSERT_NE(at, std::string::npos) << yaml;
    yaml.replace(at, 11, "name: onebit_adam");
    std::ofstream(onebit / "config.yaml") << yaml;
  }
  r = analyze(onebit.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_EQ(r.findings[0].sets.size(), 1u);
  EXPECT_EQ(r.findings[0].sets[0].rfind("optimizer.onebit.freeze_step=", 0), 0u)
      << r.findings[0].sets[0];
  fs::remove_all(onebit);
  // At 16% of the link the messages, not the link, are the limit: larger buckets.
  const fs::path slow = Changed("healthy", "slow_messages", Comm(60, 25, 0.02),
                                "bandwidth_gbps: 0.0", "bandwidth_gbps: 1.0");
  r = analyze(slow.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.bucket_mb=50"});
  fs::remove_all(dir);
  fs::remove_all(slow);
}

TEST(ReportRules, SmallMicroBatchKeepsTheGlobalBatchInPlaceOfBlamingTheKernels) {
  // 8 x 16 = 128 rows per product; a peak of 200 puts MFU at 25%.
  const fs::path dir = Changed(
      "healthy", "micro", [](json&) {}, "micro_batch: 8\n  grad_accum_steps: 2",
      "micro_batch: 1\n  grad_accum_steps: 16");
  SetSummary(dir, "peak_gflops", 200.0);
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"micro_batch"});
  EXPECT_EQ(r.findings[0].sets,
            (std::vector<std::string>{"train.micro_batch=4", "train.grad_accum_steps=4"}));
  fs::remove_all(dir);
}

TEST(ReportRules, StragglerIsNamedByBusyTimeAndItsWaitIsNotBlamedOnTheNetwork) {
  // Rank 1 is named from step 3 on and is busy 150 ms while the others are busy 100 ms;
  // the fast rank waits 50 ms, the straggler itself 0.
  const fs::path dir = Changed("healthy", "straggler", [](json& r) {
    Comm(50, 50)(r);
    r["ranks"]["world"] = 2;
    r["ranks"]["phase_ms"]["comm_exposed"]["min"] = 0.0;
    r["ranks"]["straggler"] = int(r["step"]) >= 3 ? json(1) : json(nullptr);
    r["ranks"]["busy_ms_max"] = 150.0;
    r["ranks"]["busy_ms_median"] = 100.0;
  });
  SetSummary(dir, "world", 2);
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"straggler"});
  EXPECT_NE(r.findings[0].evidence.find("rank 1 was named a straggler in 18 of 18 steady steps"),
            std::string::npos)
      << r.findings[0].evidence;
  EXPECT_NE(r.findings[0].evidence.find("busy 150.0 ms per step against the median rank's 100.0"),
            std::string::npos);
  fs::remove_all(dir);
}

// The report counts buckets from the config alone; GradSync cuts the real buffer.
TEST(ReportRules, GradientBucketsMatchGradSync) {
  for (const char* file : {"tiny.yaml", "small.yaml"}) {
    const Config cfg = load_config(std::string(RINGSTEP_SOURCE_DIR) + "/configs/" + file);
    Gpt model(cfg.model);
    for (double mb : {25.0, 2.0, 1.5, 0.72, 0.5, 0.05}) {
      CommConfig comm = cfg.comm;
      comm.bucket_mb = mb;
      GradSync sync(nullptr, comm);
      sync.setup(model);
      EXPECT_EQ(gradient_buckets(cfg.model, mb), int(sync.buckets().size())) << file << " " << mb;
    }
  }
}

}  // namespace
}  // namespace ringstep
