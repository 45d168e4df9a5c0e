#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "optim/adamw.h"

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

}  // namespace
}  // namespace ringstep
