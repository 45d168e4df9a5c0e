#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/small_run.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("ringstep_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

Config SmallRun(const fs::path& out, int steps) {
  return ringstep::testing::SmallRun(out.string(), steps);
}

TEST(Trainer, SameSeedSameConfigBitIdenticalLosses) {
  fs::path out = TempDir("determinism");
  TrainOutcome a = train(SmallRun(out / "a", 6), nullptr);
  TrainOutcome b = train(SmallRun(out / "b", 6), nullptr);
  ASSERT_EQ(a.losses.size(), 6u);
  ASSERT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)));
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  // The loss moves: the run is not trivially constant.
  EXPECT_LT(a.losses.back(), a.losses.front());
  fs::remove_all(out);
}

TEST(Trainer, WritesRunDirectoryWithStepRecords) {
  fs::path out = TempDir("rundir");
  train(SmallRun(out, 3), nullptr);
  ASSERT_TRUE(fs::exists(out / "config.yaml"));
  // The effective config reads back to the config that ran.
  Config back = load_config((out / "config.yaml").string());
  EXPECT_EQ(back.train.steps, 3);
  std::ifstream steps(out / "steps.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(steps, line)) {
    auto rec = nlohmann::json::parse(line);
    const auto& t = rec["time_ms"];
    const double sum = t["data"].get<double>() + t["forward"].get<double>() +
                       t["backward"].get<double>() + t["optimizer"].get<double>() +
                       t["comm_exposed"].get<double>() + t["other"].get<double>();
    EXPECT_NEAR(sum, t["step"].get<double>(), 0.01);  // the sum rule, to the rounding
    EXPECT_EQ(rec["step"].get<int>(), ++n);
    EXPECT_EQ(rec["tokens"].get<double>(), 2 * 2 * 16);
  }
  EXPECT_EQ(n, 3);
  auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(summary["steps"], 3);
  EXPECT_GT(summary["activations_peak_bytes"].get<double>(), 0);
  fs::remove_all(out);
}

// A config changed in code after loading is checked by the same schema and rules: a value
// the rules refuse (nccl on cpu) is refused, never silently replaced by what runs.
TEST(Trainer, RuleBrokenInCodeIsRefusedBeforeAnythingIsWritten) {
  fs::path out = TempDir("unbuilt");
  Config cfg = SmallRun(out, 2);
  cfg.comm.backend = CommBackend::nccl;  // on run.device cpu
  try {
    train(cfg, nullptr);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'comm.backend' nccl reduces gradients in GPU memory: "
                                         "it needs run.device cuda"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

// 1-bit Adam on one rank has nothing to compress: it is AdamW, bit for bit, and its records
// say it stayed in the warm-up.
TEST(Trainer, OneBitAdamOnOneRankIsAdamW) {
  fs::path out = TempDir("onebit1");
  TrainOutcome adamw = train(SmallRun(out / "adamw", 6), nullptr);
  Config cfg = SmallRun(out / "onebit", 6);
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  cfg.optimizer.onebit.freeze_step = 2;
  TrainOutcome onebit = train(cfg, nullptr);
  EXPECT_EQ(onebit.params_fnv1a64, adamw.params_fnv1a64);
  ASSERT_EQ(onebit.losses.size(), 6u);
  std::ifstream steps(out / "onebit" / "steps.jsonl");
  for (std::string line; std::getline(steps, line);)
    EXPECT_EQ(nlohmann::json::parse(line)["stage"], "warmup");
  fs::remove_all(out);
}

// Without loss scaling an inf/NaN is a fault: the run stops after that step's record,
// naming the step and the rank; with train.on_nan: skip it skips such steps and goes on.
// An absurd learning rate makes step 2's forward overflow.
TEST(Trainer, NonFiniteLossWithoutScalingStopsNamingStepAndRank) {
  fs::path out = TempDir("nan");
  Config cfg = SmallRun(out / "stop", 4);
  cfg.train.lr = 1e30;
  // Steps 3 and 4 run before the host reads (log_every 10) and are dropped: so is their trace.
  cfg.profile.trace_steps = {3, 4};
  try {
    train(cfg, nullptr);
    FAIL() << "expected TrainingStopped";
  } catch (const TrainingStopped& e) {
    EXPECT_NE(std::string(e.what()).find("step 2: the loss or gradients are inf or NaN (first "
                                         "seen on rank 0; dtype fp32"),
              std::string::npos)
        << e.what();
  }
  std::ifstream steps(out / "stop" / "steps.jsonl");
  std::string line, last;
  int n = 0;
  while (std::getline(steps, line)) ++n, last = line;
  EXPECT_EQ(n, 2);
  EXPECT_TRUE(nlohmann::json::parse(last)["skipped"].get<bool>());
  auto summary = nlohmann::json::parse(std::ifstream(out / "stop" / "summary.json"));
  EXPECT_NE(summary["stopped_early"].get<std::string>().find("step 2"), std::string::npos);
  EXPECT_EQ(summary["steps"].get<int>(), 2);
  EXPECT_FALSE(fs::exists(out / "stop" / "trace"));

  cfg = SmallRun(out / "skip", 4);
  cfg.train.lr = 1e30;
  cfg.train.on_nan = OnNan::skip;
  cfg.profile.trace_steps = {3, 4};
  const TrainOutcome r = train(cfg, nullptr);
  EXPECT_EQ(r.loss_scales.size(), 4u);
  EXPECT_EQ(r.skipped_steps, 3);
  EXPECT_EQ(r.optimizer_steps, 1);
  EXPECT_TRUE(fs::exists(out / "skip" / "trace" / "rank-0.json"));  // skipped steps count
  fs::remove_all(out);
}

TEST(Trainer, BadDataFileLeavesNoRunDirectory) {
  fs::path out = TempDir("baddata");
  Config cfg = SmallRun(out, 2);
  cfg.data.source = DataSourceKind::file;
  cfg.data.path = (out.parent_path() / "does_not_exist.bin").string();
  EXPECT_THROW(train(cfg, nullptr), InputError);
  EXPECT_FALSE(fs::exists(out));
}

// The learning check: configs/tiny.yaml as shipped ends within 0.05 nats of the synthetic
// source's floor for its window length in fp32, and bf16 and fp16 (16-bit activations,
// fp16 with dynamic loss scaling) end within 0.05 nats of fp32's validation loss.
TEST(Trainer, TinyConfigReachesEntropyFloorInFp32Bf16AndFp16) {
  fs::path out = TempDir("tiny");
  auto run = [&](const std::string& dtype) {
    Config cfg = load_config(std::string(RINGSTEP_SOURCE_DIR) + "/configs/tiny.yaml",
                             {"run.out_dir=" + (out / dtype).string(), "train.eval_every=0",
                              "precision.dtype=" + dtype, "run.threads=1"});
    TrainOutcome r = train(cfg, nullptr);
    auto summary = nlohmann::json::parse(std::ifstream(out / dtype / "summary.json"));
    EXPECT_EQ(summary["skipped_steps"].get<int>(), r.skipped_steps);
    return std::make_pair(r, summary["entropy_floor"].get<double>());
  };
  const auto [f32, floor] = run("fp32");
  EXPECT_GE(f32.final_val_loss, floor - 0.01);  // nothing beats the floor (sampling noise aside)
  EXPECT_LE(f32.final_val_loss - floor, 0.05) << "val " << f32.final_val_loss << " floor " << floor;
  EXPECT_EQ(f32.skipped_steps, 0);
  for (const std::string dtype : {"bf16", "fp16"}) {
    const TrainOutcome r = run(dtype).first;
    EXPECT_LE(std::abs(r.final_val_loss - f32.final_val_loss), 0.05)
        << dtype << " val " << r.final_val_loss << " fp32 val " << f32.final_val_loss;
    // fp16 starts at 65536 and may skip a few steps while it finds its scale; bf16 never.
    EXPECT_LE(r.skipped_steps, dtype == "fp16" ? 20 : 0) << dtype;
  }
  fs::remove_all(out);
}

// fp16 with an initial loss scale far too large: the first steps overflow (the scaled
// dlogits pass fp16's 65504), each is skipped with the scale halved, then training goes
// on. Skipped steps leave Adam's step count and the LR schedule where they were.
TEST(Trainer, Fp16OverflowSkipsStepsAndHalvesTheScale) {
  fs::path out = TempDir("fp16_overflow");
  Config cfg = SmallRun(out, 12);
  cfg.precision.dtype = DType::f16;
  cfg.precision.loss_scale.mode = LossScaleMode::dynamic;
  cfg.precision.loss_scale.initial = 0x1p24;
  cfg.precision.loss_scale.growth_interval = 1000;
  TrainOutcome r = train(cfg, nullptr);
  ASSERT_EQ(r.loss_scales.size(), 12u);
  ASSERT_GT(r.skipped_steps, 0);
  ASSERT_LT(r.skipped_steps, 12);
  EXPECT_EQ(r.optimizer_steps, 12 - r.skipped_steps);
  std::ifstream steps(out / "steps.jsonl");
  std::string line;
  int n = 0, skipped = 0;
  double first_applied_lr = -1;
  while (std::getline(steps, line)) {
    const auto rec = nlohmann::json::parse(line);
    ++n;
    EXPECT_EQ(rec["loss_scale"].get<double>(), r.loss_scales[n - 1]);
    const bool skip = rec["skipped"].get<bool>();
    if (n == 1) EXPECT_TRUE(skip) << "2^24 x dloss must overflow fp16 on the first step";
    // The scale halves after each skipped step (hysteresis 1) and holds otherwise
    // (growth_interval 1000 is never reached).
    if (n < 12)
      EXPECT_EQ(r.loss_scales[n], skip ? r.loss_scales[n - 1] / 2 : r.loss_scales[n - 1])
          << "step " << n;
    if (skip) {
      ++skipped;
      EXPECT_TRUE(rec["grad_norm"].is_null());
    } else if (first_applied_lr < 0) {
      first_applied_lr = rec["lr"].get<double>();
    }
  }
  EXPECT_EQ(n, 12);
  EXPECT_EQ(skipped, r.skipped_steps);
  // The first applied step uses the schedule's first value (warmup step 1 of 1).
  EXPECT_DOUBLE_EQ(first_applied_lr, cfg.train.lr * 1.0 / cfg.train.warmup_steps);
  auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(summary["skipped_steps"].get<int>(), r.skipped_steps);
  fs::remove_all(out);
}

// One rank's steps are decided in the runtime's memory and read once per log interval
// (train/deferred_steps.h): reading them every step or every fifth changes no value of any
// record, through overflows that skip steps and halve the scale.
TEST(Trainer, DeferredStepsReadPerIntervalEqualReadEveryStep) {
  fs::path out = TempDir("deferred");
  std::vector<nlohmann::json> records[2];
  TrainOutcome outcome[2];
  for (int i = 0; i < 2; ++i) {
    const fs::path dir = out / std::to_string(i);
    Config cfg = SmallRun(dir, 12);
    cfg.precision.dtype = DType::f16;
    cfg.precision.loss_scale.mode = LossScaleMode::dynamic;
    cfg.precision.loss_scale.initial = 0x1p24;
    cfg.precision.loss_scale.growth_interval = 3;
    cfg.profile.log_every = i == 0 ? 1 : 5;
    outcome[i] = train(cfg, nullptr);
    std::ifstream steps(dir / "steps.jsonl");
    for (std::string line; std::getline(steps, line);) {
      nlohmann::json r = nlohmann::json::parse(line);
      for (const char* timing : {"time_ms", "time_unix", "tokens_per_s", "model_gflops",
                                 "hardware_gflops", "mfu", "ranks", "ops", "comm_busbw_gbs"})
        r.erase(timing);
      records[i].push_back(r);
    }
  }
  ASSERT_EQ(records[0].size(), 12u);
  EXPECT_EQ(records[0], records[1]);
  EXPECT_GT(outcome[0].skipped_steps, 0);
  EXPECT_EQ(outcome[0].skipped_steps, outcome[1].skipped_steps);
  EXPECT_EQ(outcome[0].optimizer_steps, outcome[1].optimizer_steps);
  EXPECT_EQ(outcome[0].loss_scales, outcome[1].loss_scales);
  EXPECT_EQ(outcome[0].params_fnv1a64, outcome[1].params_fnv1a64);
  fs::remove_all(out);
}

// A scale that never fits this model (static 2^24): every step overflows, and after
// max_consecutive_skips in a row the run stops with a message, keeping its records.
TEST(Trainer, ConsecutiveSkipsStopTheRun) {
  fs::path out = TempDir("fp16_stop");
  Config cfg = SmallRun(out, 10);
  cfg.precision.dtype = DType::f16;
  cfg.precision.loss_scale.mode = LossScaleMode::static_;
  cfg.precision.loss_scale.initial = 0x1p24;
  cfg.precision.loss_scale.max_consecutive_skips = 3;
  try {
    train(cfg, nullptr);
    FAIL() << "expected TrainingStopped";
  } catch (const TrainingStopped& e) {
    EXPECT_NE(std::string(e.what()).find("3"), std::string::npos) << e.what();
  }
  std::ifstream steps(out / "steps.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(steps, line)) {
    ++n;
    EXPECT_TRUE(nlohmann::json::parse(line)["skipped"].get<bool>());
  }
  EXPECT_EQ(n, 3);
  auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(summary["skipped_steps"].get<int>(), 3);
  EXPECT_EQ(summary["optimizer_steps"].get<int>(), 0);
  // The host read steps 1-10 at once (log_every 10): 4-10 ran after the stop and are gone.
  ASSERT_EQ(cfg.profile.log_every, 10);
  EXPECT_EQ(summary["steps"].get<int>(), 3);
  EXPECT_FALSE(summary["stopped_early"].is_null());
  fs::remove_all(out);
}

}  // namespace
}  // namespace ringstep
