// 0/1 Adam through the trainer on 2, 3 and 4 ranks: the step records show each step's stage
// and what it sent (fp32 on variance steps, about 1 bit per element on syncs, nothing on
// local steps); every rank ends with the same parameters; a run resumed from a checkpoint
// inside each stage (the warm-up, the variance-updating steps, the frozen local steps,
// where the ranks' parameters differ) is bit-identical to the run that never stopped; a
// resume on another world size averages m and u and keeps the compressed error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/files.h"
#include "models/gpt.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "optim/zero_one_adam.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

using ringstep::testing::world;
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_dir(world(), "zero_one", name);
}

// T_v = {1, 2, 4, 6}; compressed 3, 5, 7, 8; F = 8; then syncs 9-12, 14, 16, 19, 20 and
// local steps 13, 15, 17, 18 (optim/zero_one_adam.h's schedule with these knobs).
Config ZeroOneRun(const std::string& out_dir, int steps) {
  Config cfg = ringstep::testing::SmallRun(out_dir, steps);
  cfg.optimizer.name = OptimizerKind::zero_one_adam;
  cfg.optimizer.betas = {0.9, 0.999};
  cfg.optimizer.zero_one = {8, 2, 4, 3};
  cfg.train.schedule = LrScheduleKind::constant;
  cfg.comm.bucket_mb = 0.01;  // several buckets, each with several tensors
  cfg.train.grad_clip = 0.5;
  cfg.train.weight_decay = 0.1;
  cfg.profile.log_every = 1;
  return cfg;
}

std::string expected_stage(int s) {
  if (s == 1 || s == 2 || s == 4 || s == 6) return "warmup";
  if (s <= 8) return "compressed";
  if (s == 13 || s == 15 || s == 17 || s == 18) return "local";
  return "sync";
}

std::vector<nlohmann::json> records(const fs::path& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "steps.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(ZeroOneTrainer, StagesBytesAndIdenticalReplicas) {
  const fs::path dir = fresh_dir("stages");
  Config cfg = ZeroOneRun(dir.string(), 20);
  cfg.train.check_replicas_every = 1;  // wherever replicas_agree(): CommError if they differ
  const TrainOutcome r = train(cfg, &world());
  std::vector<uint64_t> all(size_t(world().size()));
  all[size_t(world().rank())] = r.params_fnv1a64;
  world().allgather_bytes(all.data(), sizeof(uint64_t));
  for (uint64_t h : all) EXPECT_EQ(h, all[0]);
  EXPECT_EQ(r.optimizer_steps, 20);
  if (world().rank() != 0) return;
  const auto recs = records(dir);
  ASSERT_EQ(recs.size(), 20u);
  const double fp32 = recs[0]["comm_sent_bytes"].get<double>();
  ASSERT_GT(fp32, 0);
  for (const auto& rec : recs) {
    const int step = rec["step"];
    const std::string stage = expected_stage(step);
    EXPECT_EQ(rec["stage"], stage) << step;
    const double sent = rec["comm_sent_bytes"].get<double>();
    if (stage == "warmup") EXPECT_EQ(sent, fp32) << step;
    if (stage == "local") EXPECT_EQ(sent, 0) << step;
    if (stage == "compressed" || stage == "sync") {
      EXPECT_GT(sent, 0) << step;
      EXPECT_LE(sent, fp32 / 25) << step;
    }
  }
}

// Checkpoints after every step of one run; a second run resumes from the checkpoint after
// step K and must reproduce steps K+1..20 bit for bit. K = 1: inside the warm-up (v updated
// every step); 5: between variance updates (1-bit syncs); 13 and 17: after a local step,
// where each rank's parameters are its own.
TEST(ZeroOneTrainer, ResumeInsideEachStageIsBitExact) {
  const fs::path dir = fresh_dir("resume");
  Config cfg = ZeroOneRun((dir / "straight").string(), 20);
  cfg.checkpoint.every = 1;
  cfg.checkpoint.keep = 100;
  const TrainOutcome straight = train(cfg, &world());
  ASSERT_EQ(straight.losses.size(), 20u);
  for (int k : {1, 5, 13, 17}) {
    SCOPED_TRACE("resumed after step " + std::to_string(k));
    Config again = cfg;
    again.run.out_dir = (dir / ("from-" + std::to_string(k))).string();
    again.checkpoint.resume = (dir / "straight" / "checkpoints" / ("step-" + std::to_string(k)));
    const TrainOutcome resumed = train(again, &world());
    EXPECT_EQ(resumed.resumed_step, k);
    ASSERT_EQ(resumed.losses.size(), size_t(20 - k));
    for (int i = 0; i < 20 - k; ++i)
      EXPECT_EQ(resumed.losses[size_t(i)], straight.losses[size_t(k + i)]) << "step " << k + i + 1;
    EXPECT_EQ(resumed.params_fnv1a64, straight.params_fnv1a64);
    EXPECT_EQ(resumed.optimizer_steps, 20);
  }
}

// A checkpoint after local step 13 (the ranks' m, u and parameters differ) loaded on one
// rank and on one more rank than saved it: m and u are the saved ranks' means, the worker
// error their mean plus the sum of the server errors, the server error 0, and both loads
// rebuild the same parameters, which are none of the saved ranks'.
TEST(ZeroOneWorldChange, ResumeOnAnotherWorldSizeAveragesTheLocalState) {
  const fs::path dir = fresh_dir("world_change");
  Config cfg = ZeroOneRun(dir.string(), 14);
  cfg.checkpoint.every = 13;
  train(cfg, &world());
  world().barrier();
  if (world().rank() != 0) return;
  const int n = world().size();
  const fs::path ckpt = dir / "checkpoints" / "step-13";
  Gpt model(cfg.model);
  const size_t count = model.registry().total_numel();
  std::vector<float> mean[3], sum_s(count, 0.0f);
  for (auto& v : mean) v.assign(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    const std::string bytes = read_regular_file(
        (ckpt / ("zero_one-rank-" + std::to_string(r) + ".bin")).string(), kNoSizeLimit, "t");
    ASSERT_EQ(bytes.size(), 4 * count * sizeof(float));
    const float* f = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < count; ++i) {
      for (int k = 0; k < 3; ++k) mean[k][i] += f[size_t(k) * count + i];
      sum_s[i] += f[3 * count + i];
    }
  }
  const std::string saved_params =
      read_regular_file((ckpt / "params.bin").string(), kNoSizeLimit, "p");
  std::vector<std::vector<float>> rebuilt;
  for (const auto& [rank, new_world] : {std::pair{0, 1}, std::pair{n, n + 1}}) {
    TrainState state(model.registry(), cfg, make_data_source(cfg, "train", rank, new_world));
    FlatBuffer params(count);
    load_checkpoint(ckpt.string(), cfg, rank, new_world, params, state);
    auto& opt = dynamic_cast<ZeroOneAdam&>(*state.optimizer);
    EXPECT_EQ(opt.step_count(), 13);
    bool any_u = false;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(opt.m().data()[i], mean[0][i] * (1.0f / float(n))) << "m " << i;
      ASSERT_EQ(opt.u().data()[i], mean[1][i] * (1.0f / float(n))) << "u " << i;
      ASSERT_EQ(opt.worker_error().data()[i], mean[2][i] * (1.0f / float(n)) + sum_s[i])
          << "worker error " << i;
      ASSERT_EQ(opt.server_error().data()[i], 0.0f) << "server error " << i;
      any_u = any_u || opt.u().data()[i] != 0.0f;
    }
    EXPECT_TRUE(any_u) << "a local step's u is all zero: nothing was averaged";
    EXPECT_NE(std::memcmp(params.data(), saved_params.data(), params.bytes()), 0)
        << "the parameters are rank 0's, not rebuilt from the averaged u";
    rebuilt.emplace_back(params.data(), params.data() + count);
  }
  EXPECT_EQ(rebuilt[0], rebuilt[1]);
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
