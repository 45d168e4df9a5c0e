#include "core/stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace ringstep {
namespace {

TEST(Stats, PercentileInterpolatesLikeNumpy) {
  // numpy.percentile([3, 1, 4, 1, 5], [0, 25, 50, 90, 100]) = 1, 1, 3, 4.6, 5.
  const std::vector<double> v = {3, 1, 4, 1, 5};
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.25), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 4.6);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 5.0);
  EXPECT_DOUBLE_EQ(percentile({2, 4}, 0.5), 3.0);  // the mean of the middle two
  EXPECT_DOUBLE_EQ(percentile({7}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
}

TEST(Stats, WarmupRuleExcludesAtLeastOneAtMostFive) {
  EXPECT_EQ(warmup_steps_excluded(1), 0);  // never every step
  EXPECT_EQ(warmup_steps_excluded(2), 1);
  EXPECT_EQ(warmup_steps_excluded(19), 1);
  EXPECT_EQ(warmup_steps_excluded(20), 2);
  EXPECT_EQ(warmup_steps_excluded(49), 4);
  EXPECT_EQ(warmup_steps_excluded(300), 5);
}

}  // namespace
}  // namespace ringstep
