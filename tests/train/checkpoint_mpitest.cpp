// Checkpoints on several ranks: 10 steps, a checkpoint, and a second train() resuming for
// 10 more give the losses, loss scales and final parameters of 20 steps straight, bit for
// bit, with every rank's data stream resumed where it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "mpi/mpitest_main.h"
#include "train/checkpoint_run.h"
#include "train/small_run.h"

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

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
