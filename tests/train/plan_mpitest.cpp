// The plan against the trainer on 2, 3 and 4 ranks: a 0/1 Adam run's stages, step by step,
// are the ones the plan counts from the schedule, and the bytes its step records say each
// rank sent over the run are the plan's, stage by stage.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "train/plan.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

using ringstep::testing::world;
namespace fs = std::filesystem;

// Every stage, with blocks of the sign code's scales: T_v = {1, 2, 4, 6}, compressed 3, 5,
// 7, 8, F = 8, then syncs and local steps (optim/zero_one_adam.h's schedule).
TEST(PlanTrainer, ZeroOneAdamSendsWhatThePlanPredicts) {
  const fs::path dir = testing::fresh_dir(world(), "plan", "zero_one");
  Config cfg = testing::SmallRun(dir.string(), 20);
  cfg.optimizer.name = OptimizerKind::zero_one_adam;
  cfg.optimizer.zero_one = {8, 2, 4, 3};
  cfg.optimizer.onebit.scale_block = 500;
  cfg.profile.log_every = 1;
  train(cfg, &world());
  if (world().rank() != 0) return;

  PlanCluster cluster;
  cluster.ranks = cluster.per_node = world().size();
  cluster.intra = cluster.inter = table_link("shm");
  cluster.fixed_algorithm = true;
  const Prediction p =
      predict(cfg, cpu_device(default_cpu_calibration(), DType::f32, 1, world().size()), cluster);
  ASSERT_TRUE(p.staged);

  std::array<int, kOneBitStageCount> steps{};
  std::array<double, kOneBitStageCount> sent{};
  std::ifstream in(dir / "steps.jsonl");
  int records = 0;
  for (std::string line; std::getline(in, line); ++records) {
    const nlohmann::json rec = nlohmann::json::parse(line);
    const OneBitStage stage = parse_name<OneBitStage>(rec["stage"].get<std::string>(), "stage");
    ++steps[size_t(stage)];
    sent[size_t(stage)] += rec["comm_sent_bytes"].get<double>();
  }
  ASSERT_EQ(records, 20);
  double total = 0;
  for (const auto& [stage, stage_name] : enum_names(OneBitStage{})) {
    const StagePrediction& s = p.stages[size_t(stage)];
    EXPECT_EQ(steps[size_t(stage)], s.steps) << stage_name;
    EXPECT_GT(s.steps, 0) << stage_name;
    total += sent[size_t(stage)];
    // The 1-bit code's bytes exactly (padding and scales as sign_allreduce_bytes counts
    // them); the fp32 AllReduce's 2(p-1)/p of the buffer, which the trainer rounds down to
    // a whole byte on each step.
    if (stage == OneBitStage::warmup)
      EXPECT_NEAR(sent[size_t(stage)], s.steps * s.sent_bytes, s.steps) << stage_name;
    else
      EXPECT_EQ(sent[size_t(stage)], s.steps * s.sent_bytes) << stage_name;
  }
  EXPECT_NEAR(total, p.run_sent_bytes, p.stages[size_t(OneBitStage::warmup)].steps);
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
