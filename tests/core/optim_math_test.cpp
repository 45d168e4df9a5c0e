// AdamW's per-element math (core/optim_math.h), the CUDA kernel's, element by element
// against optim/'s AdamW (the CPU runtime's chunked, threaded pass) over a registry with decayed and undecayed tensors, three steps
// (so the bias corrections move), with a gradient scale. No GPU needed.
#include "core/optim_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/registry.h"
#include "optim/adamw.h"

namespace ringstep {
namespace {

TEST(AdamWMath, ElementMatchesAdamWStep) {
  Registry reg;
  reg.add("w", {7, 13});          // decayed
  reg.add("b", {13}, false);      // not decayed
  const size_t n = reg.total_numel();
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> p(n), twin;
  for (float& x : p) x = d(gen);
  twin = p;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(reg, hp);
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g(n);
    for (float& x : g) x = d(gen);
    const double lr = 1e-2 * t, gs = 0.5;
    opt.step(p.data(), g.data(), lr, gs);
    const AdamWStep s = adamw_scalars(hp.beta1, hp.beta2, hp.eps, lr, t, gs);
    for (const TensorInfo& ti : reg.tensors()) {
      const float decay = ti.decay ? float(lr * hp.weight_decay) : 0.0f;
      for (size_t i = ti.offset; i < ti.offset + ti.numel; ++i)
        adamw_element(twin[i], g[i], m[i], v[i], s, decay);
    }
  }
  for (const TensorInfo& ti : reg.tensors())
    for (size_t i = ti.offset; i < ti.offset + ti.numel; ++i) {
      ASSERT_NEAR(twin[i], p[i], 1e-6f * std::max(1.0f, std::fabs(p[i]))) << ti.name << " " << i;
      ASSERT_NEAR(m[i], opt.m().data()[i], 1e-6f) << i;
      ASSERT_NEAR(v[i], opt.v().data()[i], 1e-6f) << i;
    }
}

}  // namespace
}  // namespace ringstep
