// One rank: losses and final parameters bit-identical to the recorded goldens
// (tests/train/golden_run.h says what is recorded and when a machine skips).
#include <gtest/gtest.h>

#include "train/golden_run.h"

namespace ringstep {
namespace {

TEST(Golden, OneRankRunsAreBitIdenticalToTheGoldens) {
  ringstep::testing::check_goldens(nullptr, 0, 1);
}

}  // namespace
}  // namespace ringstep
