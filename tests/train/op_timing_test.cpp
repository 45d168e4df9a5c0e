// Per-op timing (profile.op_every): which steps carry ops, which ops they carry, and that
// the ops account for the forward and backward phases they sit in.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "train/step_record.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

// tiny.yaml's model at 4 sequences per step, one thread, a fixed peak (no start-up SGEMM).
Config TinyRun(const std::string& name, int steps) {
  Config cfg = load_config(std::string(RINGSTEP_SOURCE_DIR) + "/configs/tiny.yaml");
  cfg.run.out_dir = (fs::temp_directory_path() / ("ringstep_ops_" + name)).string();
  fs::remove_all(cfg.run.out_dir);
  cfg.run.threads = 1;
  cfg.train.steps = steps;
  cfg.train.micro_batch = 2;
  cfg.train.grad_accum_steps = 2;
  cfg.train.eval_every = 0;
  cfg.train.eval_batches = 1;
  cfg.profile.peak_gflops = 100;
  cfg.profile.trace_steps = {};
  return cfg;
}

std::vector<StepRecord> Records(const Config& cfg) {
  std::ifstream in(fs::path(cfg.run.out_dir) / "steps.jsonl");
  std::vector<StepRecord> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(step_record_from_json(nlohmann::json::parse(line), "steps.jsonl"));
  return out;
}

TEST(OpTiming, EveryNthStepCarriesOpsThatAddUpToItsPhases) {
  Config cfg = TinyRun("sum", 6);
  cfg.profile.op_every = 2;
  train(cfg, nullptr);
  const std::vector<StepRecord> recs = Records(cfg);
  ASSERT_EQ(recs.size(), 6u);
  double fwd = 0, fwd_ops = 0, bwd = 0, bwd_ops = 0;
  for (const StepRecord& r : recs) {
    EXPECT_EQ(r.ops.empty(), r.step % 2 != 0) << "step " << r.step;
    if (r.ops.empty()) continue;
    fwd += r.time_ms.forward, fwd_ops += r.ops.phase_ms(OpPhase::forward);
    bwd += r.time_ms.backward, bwd_ops += r.ops.phase_ms(OpPhase::backward);
    // 2 micro-batches x 4 blocks: each block product once per micro-batch and direction.
    EXPECT_EQ(r.ops.at(OpPhase::forward, Op::qkv).calls, 8);
    EXPECT_EQ(r.ops.at(OpPhase::backward, Op::mlp_proj).calls, 8);
    EXPECT_EQ(r.ops.at(OpPhase::forward, Op::lm_head).calls, 2);
    EXPECT_EQ(r.ops.at(OpPhase::optimizer, Op::optimizer).calls, 1);
    EXPECT_EQ(r.ops.at(OpPhase::forward, Op::cast_weights).calls, 0);  // fp32: no copy
    // qkv forward: 2 N C 3C FLOPs per call, N = 2 x 128 rows, C = 128.
    EXPECT_DOUBLE_EQ(r.ops.at(OpPhase::forward, Op::qkv).flops, 8 * 2.0 * 256 * 128 * 384);
  }
  // Ratios of sums over the timed steps: the gaps between ops are bookkeeping.
  EXPECT_NEAR(fwd_ops / fwd, 1.0, 0.05) << fwd_ops << " of " << fwd << " ms";
  EXPECT_NEAR(bwd_ops / bwd, 1.0, 0.05) << bwd_ops << " of " << bwd << " ms";
  EXPECT_LE(fwd_ops, fwd);
  EXPECT_LE(bwd_ops, bwd);
}

TEST(OpTiming, RecomputedForwardOpsCountInBackwardAndOffMeansNone) {
  Config cfg = TinyRun("recompute", 2);
  cfg.precision.dtype = DType::bf16;
  cfg.recompute.policy = RecomputePolicy::full;
  cfg.profile.op_every = 1;
  train(cfg, nullptr);
  const StepRecord r = Records(cfg).back();
  // Full recompute reruns each block's qkv forward in backward: 2 calls per block and
  // micro-batch there. The 16-bit backend rounds its weight copy after each update.
  EXPECT_EQ(r.ops.at(OpPhase::backward, Op::qkv).calls, 16);
  EXPECT_EQ(r.ops.at(OpPhase::forward, Op::cast_weights).calls, 1);

  cfg = TinyRun("off", 2);
  cfg.profile.op_every = 0;
  cfg.profile.trace_steps = {1, 2};
  train(cfg, nullptr);
  for (const StepRecord& rec : Records(cfg)) EXPECT_TRUE(rec.ops.empty()) << rec.step;
}

}  // namespace
}  // namespace ringstep
