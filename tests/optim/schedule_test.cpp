#include <gtest/gtest.h>

#include <cmath>

#include "optim/schedule.h"

namespace ringstep {
namespace {

TEST(LrSchedule, WarmupThenCosineToMinimum) {
  LrSchedule s{LrScheduleKind::cosine, 1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: min + (max-min)/2
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  LrSchedule lin{LrScheduleKind::linear, 1.0, 0.0, 0, 100};
  EXPECT_NEAR(lin.at(25), 0.75, 1e-12);
  LrSchedule c{LrScheduleKind::constant, 0.3, 0.1, 2, 100};
  EXPECT_DOUBLE_EQ(c.at(0), 0.15);
  EXPECT_DOUBLE_EQ(c.at(50), 0.3);
}

}  // namespace
}  // namespace ringstep
