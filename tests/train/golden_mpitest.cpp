// Several ranks: losses and final parameters bit-identical to the recorded goldens of this
// world size (tests/train/golden_run.h says what is recorded and when a machine skips).
#include <gtest/gtest.h>

#include "mpi/mpitest_main.h"
#include "train/golden_run.h"

namespace ringstep {
namespace {

using ringstep::testing::world;

TEST(GoldenMultiRank, RunsAreBitIdenticalToTheGoldens) {
  ringstep::testing::check_goldens(&world(), world().rank(), world().size());
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
