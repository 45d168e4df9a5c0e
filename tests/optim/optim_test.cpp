#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"

namespace ringstep {
namespace {

TEST(AdamW, MatchesFloat64ReferenceWithDecayMask) {
  Registry reg;
  reg.add("w", {5, 3}, true);
  reg.add("b", {3}, false);
  AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(reg, hp);
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  FlatBuffer p(reg.total_numel()), g(reg.total_numel());
  for (size_t i = 0; i < p.size(); ++i) p.data()[i] = nd(gen);
  std::vector<double> rp(p.data(), p.data() + p.size()), rm(p.size()), rv(p.size());
  const double lr = 1e-2, scale = 0.5;
  for (int t = 1; t <= 5; ++t) {
    for (size_t i = 0; i < g.size(); ++i) g.data()[i] = nd(gen);
    opt.step(p.data(), g.data(), lr, scale);
    for (const auto& ti : reg.tensors())
      for (size_t k = ti.offset; k < ti.offset + ti.numel; ++k) {
        const double gi = double(g.data()[k]) * scale;
        rm[k] = 0.9 * rm[k] + 0.1 * gi;
        rv[k] = 0.95 * rv[k] + 0.05 * gi * gi;
        const double mh = rm[k] / (1 - std::pow(0.9, t)), vh = rv[k] / (1 - std::pow(0.95, t));
        rp[k] -= lr * (mh / (std::sqrt(vh) + 1e-8) + (ti.decay ? 0.1 * rp[k] : 0.0));
      }
  }
  for (const auto& ti : reg.tensors())
    for (size_t k = ti.offset; k < ti.offset + ti.numel; ++k)
      EXPECT_NEAR(p.data()[k], rp[k], 2e-6) << ti.name << " " << k;
  EXPECT_EQ(opt.step_count(), 5);
}

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
