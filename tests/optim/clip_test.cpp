#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "optim/clip.h"

namespace ringstep {
namespace {

TEST(Clip, NormAndCoefficient) {
  std::vector<float> g(3001);
  double ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = float(std::sin(double(i)));
    ref += double(g[i]) * g[i];
  }
  EXPECT_NEAR(sum_squares(g.data(), g.size()), ref, 1e-6 * ref);
  EXPECT_DOUBLE_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_coefficient(5.0, 0.0), 1.0);
  EXPECT_NEAR(clip_coefficient(4.0, 1.0) * 4.0, 1.0, 1e-6);
}

}  // namespace
}  // namespace ringstep
