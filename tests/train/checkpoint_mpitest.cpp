// Checkpoints on several ranks: 10 steps, a checkpoint, and a second train() resuming for
// 10 more give the losses, loss scales and final parameters of 20 steps straight, bit for
// bit, with every rank's data stream resumed where it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mpi/mpitest_main.h"
#include "train/checkpoint_run.h"
#include "train/small_run.h"
#include "train/token_file.h"

namespace ringstep {
namespace {

using ringstep::testing::world;
namespace fs = std::filesystem;

void ExpectResumeIsExact(const Config& base, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("ringstep_mpickpt_" + name + "_" + std::to_string(world().size()));
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  const auto r = ringstep::testing::RunStraightAndResumed(base, dir, &world());
  ringstep::testing::ExpectResumedMatchesStraight(r);
}

TEST(CheckpointMultiRank, ResumeIsBitExactFp32) {
  Config cfg = ringstep::testing::SmallRun("", 20);
  cfg.train.check_replicas_every = 5;
  ExpectResumeIsExact(cfg, "fp32");
}

TEST(CheckpointMultiRank, ResumeIsBitExactFp16DynamicScaling) {
  ExpectResumeIsExact(ringstep::testing::Fp16Dynamic(ringstep::testing::SmallRun("", 20)), "fp16");
}

// A token file of 64-token vocabulary whose windows differ from each other (a walk with
// jumps), so a window skipped or read twice changes the loss far beyond rounding.
void WriteWalk(const std::string& path) {
  std::vector<uint16_t> tokens(40000);
  uint64_t x = 12345;
  for (size_t i = 1; i < tokens.size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int step = (x >> 60) < 12 ? 1 : int(x >> 58);
    tokens[i] = uint16_t((tokens[i - 1] + step) % 64);
  }
  write_token_file(path, 64, tokens);
}

// A resume on another world size reads on from the saved data position: with the global
// batch kept (micro_batch x world), steps 11-20 match the run that never changed world size
// to rounding (they are not bit-identical: the gradient sums group the rows differently).
// FROM_WORLD and TO_WORLD are each world().size() or 1 (rank 0 alone).
void ExpectWorldChangeContinues(int from_world, int to_world, const std::string& name) {
  const int n = world().size();
  const fs::path dir =
      fs::temp_directory_path() / ("ringstep_mpiworld_" + name + "_" + std::to_string(n));
  if (world().rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    WriteWalk((dir / "walk.bin").string());
  }
  world().barrier();
  Config cfg = ringstep::testing::SmallRun((dir / "straight").string(), 20);
  cfg.data.source = DataSourceKind::file;
  cfg.data.path = (dir / "walk.bin").string();
  cfg.train.schedule = LrScheduleKind::constant;
  cfg.checkpoint.every = 10;
  const TrainOutcome straight = train(cfg, &world());

  auto run_on = [&](int ranks, int steps) {
    Config c = cfg;
    c.run.out_dir = (dir / "split").string();
    c.train.steps = steps;
    c.train.micro_batch = cfg.train.micro_batch * n / ranks;  // the same global batch
    TrainOutcome out;
    if (ranks == n)
      out = train(c, &world());
    else if (world().rank() == 0)
      out = train(c, nullptr);
    world().barrier();
    return out;
  };
  run_on(from_world, 10);
  const TrainOutcome resumed = run_on(to_world, 20);
  if (to_world == 1 && world().rank() != 0) return;
  EXPECT_EQ(resumed.resumed_step, 10);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (int i = 0; i < 10; ++i)
    EXPECT_NEAR(resumed.losses[i], straight.losses[10 + i], 2e-4) << "step " << 11 + i;
}

TEST(CheckpointMultiRank, ResumesOnOneRankWhereAllRanksStopped) {
  ExpectWorldChangeContinues(world().size(), 1, "shrink");
}

TEST(CheckpointMultiRank, ResumesOnAllRanksWhereOneRankStopped) {
  ExpectWorldChangeContinues(1, world().size(), "grow");
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
