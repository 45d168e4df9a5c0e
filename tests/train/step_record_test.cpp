#include "train/step_record.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/run_log.h"

namespace ringstep {
namespace {

StepRecord FullRecord() {
  StepRecord r;
  r.step = 12;
  r.loss = 2.5;
  r.val_loss = 2.75;
  r.lr = 0.003;
  r.tokens = 4096;
  r.grad_norm = 0.875;
  r.loss_scale = 65536;
  r.skipped = false;
  double v = 1;
  for (const PhaseField& f : kPhaseFields) r.time_ms.*f.ms = (v += 1.5);
  r.ranks.world = 3;
  r.ranks.step_ms = {10, 11, 12};
  r.ranks.slowest = 2;
  for (size_t f = 1; f < kPhaseFields.size(); ++f)
    r.ranks.phase_ms[f] = {1.0 * f, 2.0 * f, 3.0 * f};
  r.ranks.busy_ms_median = 8;
  r.ranks.busy_ms_max = 9;
  r.ranks.straggler = 1;
  r.tokens_per_s = 13110.5;
  r.model_gflops = 41.25;
  r.mfu = 0.375;
  r.hardware_gflops = 50.5;
  r.comm_bytes = 3355443;
  r.comm_busbw_gbs = 1.5;
  r.mem_bytes = {100, 200, 300, 400};
  r.ops.at(OpPhase::forward, Op::qkv) = {8, 13.25, 8e8, 1.8e7};
  r.ops.at(OpPhase::backward, Op::zero) = {38, 2.5, 0, 4.6e7};
  return r;
}

// The writer and the reader share one schema: every field survives the round trip (values
// chosen to be exact after the record's rounding).
TEST(StepRecord, EveryFieldRoundTripsThroughJson) {
  const StepRecord a = FullRecord();
  const StepRecord b = step_record_from_json(nlohmann::json::parse(to_json(a).dump()), "t");
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.loss, a.loss);
  EXPECT_EQ(b.val_loss, a.val_loss);
  EXPECT_EQ(b.lr, a.lr);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_EQ(b.grad_norm, a.grad_norm);
  EXPECT_EQ(b.loss_scale, a.loss_scale);
  EXPECT_EQ(b.skipped, a.skipped);
  for (const PhaseField& f : kPhaseFields) EXPECT_EQ(b.time_ms.*f.ms, a.time_ms.*f.ms) << f.name;
  EXPECT_EQ(b.ranks.world, 3);
  EXPECT_EQ(b.ranks.step_ms.median, 11);
  EXPECT_EQ(b.ranks.slowest, 2);
  for (size_t f = 1; f < kPhaseFields.size(); ++f) {
    EXPECT_EQ(b.ranks.phase_ms[f].min, a.ranks.phase_ms[f].min) << kPhaseFields[f].name;
    EXPECT_EQ(b.ranks.phase_ms[f].max, a.ranks.phase_ms[f].max) << kPhaseFields[f].name;
  }
  EXPECT_EQ(b.ranks.busy_ms_max, 9);
  EXPECT_EQ(b.ranks.straggler, 1);
  EXPECT_EQ(b.tokens_per_s, a.tokens_per_s);
  EXPECT_EQ(b.model_gflops, a.model_gflops);
  EXPECT_EQ(b.mfu, a.mfu);
  EXPECT_EQ(b.hardware_gflops, a.hardware_gflops);
  EXPECT_EQ(b.comm_bytes, a.comm_bytes);
  EXPECT_EQ(b.comm_busbw_gbs, a.comm_busbw_gbs);
  EXPECT_EQ(b.mem_bytes.activations_peak, 400u);
  for (size_t p = 0; p < kOpPhaseCount; ++p)
    for (size_t o = 0; o < kOpCount; ++o) {
      const OpStat &x = a.ops.stat[p][o], &y = b.ops.stat[p][o];
      EXPECT_EQ(std::vector<double>({double(y.calls), y.ms, y.flops, y.bytes}),
                std::vector<double>({double(x.calls), x.ms, x.flops, x.bytes}))
          << p << " " << o;
    }
}

TEST(StepRecord, UnknownOpIsAnInputErrorNamingTheLine) {
  nlohmann::json j = nlohmann::json::parse(to_json(FullRecord()).dump());
  j["ops"][0]["op"] = "frobnicate";
  try {
    step_record_from_json(j, "steps.jsonl:3");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("steps.jsonl:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("frobnicate"), std::string::npos) << e.what();
  }
}

TEST(StepRecord, SkippedStepHasNullNormAndNoValLoss) {
  StepRecord r = FullRecord();
  r.skipped = true;
  r.grad_norm = StepRecord::kNaN;
  r.val_loss = StepRecord::kNaN;
  r.ranks.straggler = -1;
  const auto j = to_json(r);
  EXPECT_TRUE(j["grad_norm"].is_null());
  EXPECT_FALSE(j.contains("val_loss"));
  EXPECT_TRUE(j["ranks"]["straggler"].is_null());
  EXPECT_FALSE(j["ranks"]["phase_ms"].contains("step"));  // the step's spread is step_ms_*
  const StepRecord b = step_record_from_json(nlohmann::json::parse(j.dump()), "t");
  EXPECT_TRUE(std::isnan(b.grad_norm));
  EXPECT_TRUE(std::isnan(b.val_loss));
  EXPECT_EQ(b.ranks.straggler, -1);
}

TEST(StepRecord, MissingRequiredPhaseNamesTheField) {
  auto j = nlohmann::json::parse(to_json(FullRecord()).dump());
  j["time_ms"].erase("forward");
  try {
    step_record_from_json(j, "steps.jsonl:3");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "steps.jsonl:3: missing number 'time_ms.forward'");
  }
}

// nccl-tests: busbw = bytes / time x 2(n-1)/n.
TEST(StepRecord, BusBandwidthIsNcclTestsFormula) {
  EXPECT_DOUBLE_EQ(busbw_gbs(1000000000, 1000, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_gbs(1000000000, 500, 2), 2.0);
  EXPECT_EQ(busbw_gbs(1000, 0, 2), 0);
}

// A straggler is reported once when named and once when it has been back for
// kStragglerSteps steps, with its duration; a single quiet step does not end it.
TEST(StragglerLog, ReportsStartAndEndOnce) {
  StragglerLog log;
  EXPECT_EQ(log.update(1, -1, 0), "");
  const std::string start = log.update(5, 1, 1.25);
  EXPECT_NE(start.find("rank 1 busy 25% above the median since step 3"), std::string::npos)
      << start;
  for (int step = 6; step < 20; ++step) EXPECT_EQ(log.update(step, step == 10 ? -1 : 1, 1.3), "");
  EXPECT_EQ(log.update(20, -1, 0), "");
  EXPECT_EQ(log.update(21, -1, 0), "");
  const std::string end = log.update(22, -1, 0);
  EXPECT_NE(end.find("rank 1 back within 10% of the median since step 20 (slow for 17 steps)"),
            std::string::npos)
      << end;
  for (int step = 23; step < 30; ++step) EXPECT_EQ(log.update(step, -1, 0), "");
  // Another rank taking over is a new event.
  log.update(30, 0, 1.2);
  EXPECT_NE(log.update(31, 2, 1.2).find("rank 2"), std::string::npos);
}

}  // namespace
}  // namespace ringstep
