#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/threads.h"
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

// The parallel update gives the same bits on 1, 2 and 3 threads: tensors of several
// chunks with ragged ends, decay and no decay.
TEST(AdamW, ThreadCountDoesNotChangeBits) {
  Registry reg;
  reg.add("w", {97, 1031}, true);
  reg.add("b", {1031}, false);
  reg.add("w2", {333, 77}, true);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    AdamW opt(reg, AdamWParams{0.9, 0.95, 1e-8, 0.1});
    std::mt19937 gen(3);
    std::normal_distribution<float> nd;
    FlatBuffer p(reg.total_numel()), g(reg.total_numel());
    for (size_t i = 0; i < p.size(); ++i) p.data()[i] = nd(gen);
    for (int t = 0; t < 3; ++t) {
      for (size_t i = 0; i < g.size(); ++i) g.data()[i] = nd(gen);
      opt.step(p.data(), g.data(), 1e-2, 0.5);
    }
    results.emplace_back(p.data(), p.data() + p.size());
  }
  set_compute_threads(hardware_threads());
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

}  // namespace
}  // namespace ringstep
