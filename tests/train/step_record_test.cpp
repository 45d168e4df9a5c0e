#include "train/step_record.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
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
  r.comm_sent_bytes = 5033164;
  r.comm_busbw_gbs = 1.5;
  r.stage = OneBitStage::compressed;
  r.compression_error = 0.625;
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
  EXPECT_EQ(b.comm_sent_bytes, a.comm_sent_bytes);
  EXPECT_EQ(b.comm_busbw_gbs, a.comm_busbw_gbs);
  EXPECT_EQ(b.stage, a.stage);
  EXPECT_EQ(b.compression_error, a.compression_error);
  EXPECT_EQ(b.mem_bytes.params, 100u);
  EXPECT_EQ(b.mem_bytes.grads, 200u);
  EXPECT_EQ(b.mem_bytes.optimizer, 300u);
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
    EXPECT_EQ(std::string(e.what()), "steps.jsonl:3: field 'time_ms.forward' is missing");
  }
}

// docs/logs.md: times to 1 us, tokens_per_s to 0.1, model_gflops to 0.001, mfu to 0.0001,
// and the text holds no more digits than that (round(x / q) * q left 3.3240000000000003).
TEST(StepRecord, NumbersAreWrittenWithTheirDecimalsOnly) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> ms(0, 2000), unit(0, 1);
  const std::map<std::string, int> decimals = {
      {"tokens_per_s", 1},    {"model_gflops", 3},   {"mfu", 4},
      {"hardware_gflops", 3}, {"comm_busbw_gbs", 4}, {"compression_error", 6}};
  std::set<std::string> ms_keys = {
      "step_ms_min", "step_ms_median", "step_ms_max", "busy_ms_median", "busy_ms_max",
      "min",         "median",         "max"};
  for (const PhaseField& f : kPhaseFields) ms_keys.insert(f.name);
  const std::regex number("\"([a-z_]+)\":(-?[0-9][0-9.eE+-]*)");
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    StepRecord r = FullRecord();
    for (const PhaseField& f : kPhaseFields) r.time_ms.*f.ms = ms(rng);
    r.ranks.step_ms = {ms(rng), ms(rng), ms(rng)};
    for (Spread& p : r.ranks.phase_ms) p = {ms(rng), ms(rng), ms(rng)};
    r.ranks.busy_ms_median = ms(rng), r.ranks.busy_ms_max = ms(rng);
    r.tokens_per_s = 1e5 * unit(rng), r.model_gflops = 1e3 * unit(rng), r.mfu = unit(rng);
    r.hardware_gflops = 1e3 * unit(rng), r.comm_busbw_gbs = 10 * unit(rng);
    r.compression_error = unit(rng);
    r.ops.at(OpPhase::forward, Op::qkv).ms = ms(rng);
    const std::string line = record_line(r);
    for (std::sregex_iterator m(line.begin(), line.end(), number), end; m != end; ++m) {
      const std::string key = (*m)[1], text = (*m)[2];
      const int most = ms_keys.count(key) || key == "ms" ? 3
                       : decimals.count(key)             ? decimals.at(key)
                                                         : -1;
      if (most < 0) continue;
      ++checked;
      EXPECT_EQ(text.find_first_of("eE"), std::string::npos) << key << " " << text;
      const size_t dot = text.find('.');
      const int got = dot == std::string::npos ? 0 : int(text.size() - dot - 1);
      EXPECT_LE(got, most) << key << " " << text << "\n" << line;
    }
  }
  EXPECT_GT(checked, 2000 * 40);
  // Tokens are an integer.
  EXPECT_NE(record_line(FullRecord()).find("\"tokens\":4096,"), std::string::npos);
}

// Records of earlier versions (the report fixtures: no recompute/comm breakdown per rank,
// no hardware_gflops, tokens written as 2048.0) still read.
TEST(StepRecord, OlderRecordsStillRead) {
  std::ifstream in(std::string(RINGSTEP_SOURCE_DIR) +
                   "/tests/train/fixtures/report_run/healthy/steps.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const StepRecord r = step_record_from_json(nlohmann::json::parse(line), "steps.jsonl:1");
  EXPECT_EQ(r.tokens, 2048);
  EXPECT_EQ(r.ranks.world, 1);
  EXPECT_EQ(r.ranks.straggler, -1);
  EXPECT_EQ(r.hardware_gflops, 0);
}

std::string ReadError(const nlohmann::json& j) {
  try {
    step_record_from_json(j, "run/steps.jsonl:7");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// A damaged record is an InputError naming the line and the field, whatever is wrong.
TEST(StepRecord, DamagedRecordsNameTheLineAndTheField) {
  const nlohmann::json good = nlohmann::json::parse(record_line(FullRecord()));
  const auto with = [&](const std::string& pointer, const nlohmann::json& v) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(pointer)] = v;
    return ReadError(j);
  };
  const auto without = [&](const std::string& pointer) {
    nlohmann::json j = good;
    const nlohmann::json::json_pointer p(pointer);
    j[p.parent_pointer()].erase(p.back());
    return ReadError(j);
  };
  const std::string at = "run/steps.jsonl:7: ";
  EXPECT_EQ(with("/time_ms/forward", -3.5), at + "field 'time_ms.forward' must be >= 0, got -3.5");
  EXPECT_EQ(with("/loss", "2.5"), at + "field 'loss' must be a number, got \"2.5\"");
  EXPECT_EQ(with("/lr", nullptr), at + "field 'lr' is null; it needs a value");
  EXPECT_EQ(with("/step", 2.5), at + "field 'step' must be an integer in [1, 2147483647], got 2.5");
  EXPECT_EQ(with("/step", 1e300),
            at + "field 'step' must be an integer in [1, 2147483647], got 1e+300");
  EXPECT_EQ(with("/comm_bytes", -1), at + "field 'comm_bytes' must be an integer >= 0, got -1");
  EXPECT_EQ(with("/skipped", "no"), at + "field 'skipped' must be true or false, got \"no\"");
  EXPECT_EQ(with("/ranks/world", 1e12),
            at + "field 'ranks.world' must be an integer in [1, 1048576], got 1000000000000.0");
  EXPECT_EQ(with("/ranks/phase_ms/data/max", true),
            at + "field 'ranks.phase_ms.data.max' must be a number, got true");
  EXPECT_EQ(with("/mem_bytes", 5), at + "field 'mem_bytes' must be an object, got 5");
  EXPECT_EQ(with("/ops/0/calls", -2), at + "field 'ops[0].calls' must be an integer >= 0, got -2");
  EXPECT_EQ(with("/ops", "all"), at + "field 'ops' must be a list, got \"all\"");
  EXPECT_EQ(with("/stage", "frozen"),
            at + "field 'stage' is 'frozen'; expected one of warmup, compressed, sync, local");
  EXPECT_EQ(with("/lozz", 1), at + "unknown field 'lozz'");
  EXPECT_EQ(with("/time_ms/stepp", 1), at + "unknown field 'time_ms.stepp'");
  EXPECT_EQ(without("/loss"), at + "field 'loss' is missing");
  EXPECT_EQ(without("/mem_bytes/grads"), at + "field 'mem_bytes.grads' is missing");
  nlohmann::json renamed = good;
  renamed["time_ms"]["fwd"] = renamed["time_ms"]["forward"];
  renamed["time_ms"].erase("forward");
  EXPECT_EQ(ReadError(renamed), at + "field 'time_ms.forward' is missing");
  renamed["time_ms"]["froward"] = 1.0;
  EXPECT_EQ(ReadError(renamed), at + "field 'time_ms.forward' is missing (misspelt as 'froward'?)");
  EXPECT_EQ(ReadError(nlohmann::json::array()), at + "expected a JSON object, got []");
  // What may be null or absent is: a non-finite loss, the norm of a skipped step, fields
  // that later versions added.
  EXPECT_EQ(with("/loss", nullptr), "(no error)");
  EXPECT_EQ(with("/grad_norm", nullptr), "(no error)");
  EXPECT_EQ(without("/hardware_gflops"), "(no error)");
  EXPECT_EQ(without("/time_ms/recompute"), "(no error)");
}

// MFU is model GFLOP/s over the run's one peak; 0 when the peak is unknown.
TEST(StepRecord, ThroughputIsTheOneDefinitionOfMfu) {
  // 2048 tokens in 100 ms at 5 MFLOP/token on 2 ranks: 20480 tok/s, 51.2 GFLOP/s/rank.
  const Throughput t = throughput(2048, 100, 5e6, 2, 128);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 20480);
  EXPECT_DOUBLE_EQ(t.model_gflops, 51.2);
  EXPECT_DOUBLE_EQ(t.mfu, 0.4);
  EXPECT_DOUBLE_EQ(t.mfu, model_flops_utilization(t.model_gflops, 128));
  EXPECT_EQ(throughput(2048, 100, 5e6, 2, 0).mfu, 0);
  EXPECT_EQ(throughput(2048, 0, 5e6, 2, 128).tokens_per_s, 0);
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
