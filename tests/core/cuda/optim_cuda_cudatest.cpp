// The device optimizer passes against optim/ (AdamW::step, LossScaler's unscale + check,
// clipping's norm), directly and through the cuda runtime (core/runtime.h), on buffers of
// odd length.
// Skips with the reason when no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/cuda/cuda_skip.h"
#include "core/cuda/device.h"
#include "core/normal_values.h"
#include "core/registry.h"
#include "core/runtime.h"
#include "optim/adamw.h"
#include "optim/clip.h"

#ifdef RINGSTEP_HAVE_CUDA
#include "core/cuda/optim_cuda.h"
#endif

namespace ringstep {
namespace {

class CudaOptim : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = ringstep::testing::cuda_skip_reason(); !why.empty())
      GTEST_SKIP() << why;
  }
};

#ifdef RINGSTEP_HAVE_CUDA

using ringstep::testing::normal_values;

TEST_F(CudaOptim, AdamWMatchesCpu) {
  Registry reg;
  reg.add("w", {301, 77});
  reg.add("b", {77}, false);
  const size_t n = reg.total_numel();
  const AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamW cpu(reg, hp);
  std::vector<float> p = normal_values(n, 1);
  FlatBuffer dp(n, Device::cuda), dg(n, Device::cuda), dm(n, Device::cuda), dv(n, Device::cuda);
  cuda::copy_to_device(dp.data(), p.data(), n * sizeof(float));
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = normal_values(n, 10 + uint32_t(t));
    cuda::copy_to_device(dg.data(), g.data(), n * sizeof(float));
    const double lr = 1e-2, gs = 0.25;
    cpu.step(p.data(), g.data(), lr, gs);
    const AdamWStep s = adamw_scalars(hp.beta1, hp.beta2, hp.eps, lr, t, gs);
    for (const TensorInfo& ti : reg.tensors())
      cuda::adamw_update(dp.data() + ti.offset, dg.data() + ti.offset, dm.data() + ti.offset,
                         dv.data() + ti.offset, ti.numel, s,
                         ti.decay ? float(lr * hp.weight_decay) : 0.0f);
  }
  std::vector<float> got(n);
  cuda::copy_to_host(got.data(), dp.data(), n * sizeof(float));
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(got[i], p[i], 1e-6f * std::max(1.0f, std::fabs(p[i]))) << i;
}

TEST_F(CudaOptim, UnscaleAndCheckFindsEveryNonFinite) {
  const size_t n = 100003;
  std::vector<float> g = normal_values(n, 2);
  FlatBuffer dg(n, Device::cuda), flag(1, Device::cuda);  // flag: one float's bytes
  int* f = reinterpret_cast<int*>(flag.data());
  cuda::copy_to_device(dg.data(), g.data(), n * sizeof(float));
  EXPECT_FALSE(cuda::unscale_and_check(dg.data(), n, 0.5f, f));
  std::vector<float> got(n);
  cuda::copy_to_host(got.data(), dg.data(), n * sizeof(float));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], g[i] * 0.5f) << i;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t at : {size_t(0), n / 2, n - 1}) {
      std::vector<float> h = g;
      h[at] = bad;
      cuda::copy_to_device(dg.data(), h.data(), n * sizeof(float));
      EXPECT_TRUE(cuda::unscale_and_check(dg.data(), n, 1.0f, f)) << bad << " at " << at;
    }
  }
}

// The runtime's passes on cuda buffers against the host runtime's on the same values. The
// device sums squares in double, the host in float blocks folded into double (within
// 1024 * 2^-24 of the fp64 sum whatever the data): both norms are held to an fp64 sum, and
// to each other to 1e-6 relative.
TEST_F(CudaOptim, RuntimePassesMatchTheHostRuntime) {
  const size_t n = 1000003;  // more elements than the reduction's threads: grid-stride loops
  const std::vector<float> g = normal_values(n, 5);
  FlatBuffer host(n), dev(n, Device::cuda);
  std::copy(g.begin(), g.end(), host.data());
  copy_buffer(dev, host);
  Runtime& gpu = runtime(Device::cuda);
  EXPECT_EQ(&dev.runtime(), &gpu);
  EXPECT_FALSE(gpu.host_memory());
  double fp64 = 0;
  for (float x : g) fp64 += double(x) * double(x);
  const double want = sum_squares(host), got = sum_squares(dev);
  EXPECT_NEAR(got, fp64, 1e-12 * fp64);
  EXPECT_NEAR(want, fp64, 1024 * 0x1p-24 * fp64);
  EXPECT_NEAR(std::sqrt(got), std::sqrt(want), 1e-6 * std::sqrt(want));
  EXPECT_EQ(gpu.sum_squares(dev.data(), 0), 0.0);
  EXPECT_FALSE(gpu.unscale_and_check(dev.data(), n, 0.125f));
  EXPECT_FALSE(runtime(Device::cpu).unscale_and_check(host.data(), n, 0.125f));
  FlatBuffer back(n);
  copy_buffer(back, dev);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.data()[i], host.data()[i]) << i;
  const DeviceMemory mem = gpu.memory();
  EXPECT_GT(mem.total_bytes, size_t(1) << 30);
  EXPECT_LE(mem.free_bytes, mem.total_bytes);
  EXPECT_NE(gpu.make_clock(4), nullptr);
}

// 1-bit Adam's passes (Runtime::onebit_momentum, onebit_update) on cuda buffers against the
// host runtime's on the same values, over a part [begin, end) that starts and ends inside
// tensors: the momentum and the parameters within 1e-6 relative (the kernels may contract
// into FMAs where the host does not), the zero-variance mask exact (m and both error
// buffers 0 where v is, untouched elsewhere), and nothing outside the part written.
TEST_F(CudaOptim, OneBitPassesMatchTheHostRuntime) {
  Registry reg;
  reg.add("w", {301, 77});
  reg.add("b", {77}, false);
  reg.add("w2", {129, 33});
  const size_t n = reg.total_numel(), begin = 1000, end = n - 500;
  std::vector<float> v = normal_values(n, 30);
  for (size_t i = 0; i < n; ++i) v[i] = i % 7 == 3 ? 0.0f : v[i] * v[i];
  const std::vector<float> init[] = {
      normal_values(n, 31), normal_values(n, 32), v,
      normal_values(n, 33), normal_values(n, 34), normal_values(n, 35)};  // p, m, v, g, ew, es
  std::vector<FlatBuffer> host, dev;
  for (const std::vector<float>& x : init) {
    FlatBuffer& h = host.emplace_back(n);
    std::copy(x.begin(), x.end(), h.data());
    copy_buffer(dev.emplace_back(n, Device::cuda), h);
  }
  const OneBitStep s = onebit_scalars(0.9, 0.999, 1e-8, 1e-2, 7, 4);
  const float decay = 1e-3f, beta1 = 0.9f, grad_scale = 0.5f;
  for (std::vector<FlatBuffer>* b : {&host, &dev}) {
    std::vector<FlatBuffer>& x = *b;
    Runtime& rt = x[0].runtime();
    rt.onebit_momentum(x[1].data(), x[3].data(), begin, end, beta1, grad_scale);
    rt.onebit_update(reg.tensors(), begin, end, s, decay, x[0].data(), x[1].data(), x[2].data(),
                     x[4].data(), x[5].data());
  }
  const char* names[] = {"p", "m", "v", "g", "ew", "es"};
  for (size_t k = 0; k < dev.size(); ++k) {
    FlatBuffer got(n);
    copy_buffer(got, dev[k]);
    for (size_t i = 0; i < n; ++i) {
      const float want = host[k].data()[i];
      if (i < begin || i >= end) {
        ASSERT_EQ(got.data()[i], init[k][i]) << names[k] << " outside the part, " << i;
        ASSERT_EQ(want, init[k][i]) << names[k] << " outside the part (host), " << i;
      } else if (k == 0 || (k == 1 && v[i] != 0.0f)) {
        ASSERT_NEAR(got.data()[i], want, 1e-6f * std::max(1.0f, std::fabs(want)))
            << names[k] << " " << i;
      } else {
        ASSERT_EQ(got.data()[i], want) << names[k] << " " << i;
        if (k != 2 && k != 3 && v[i] == 0.0f) {
          ASSERT_EQ(want, 0.0f) << names[k] << " " << i;
        }
      }
    }
  }
}

// AdamW::step on cuda buffers (moments on the device) against AdamW on the host, with
// clipping's coefficient folded in as the trainer does.
TEST_F(CudaOptim, AdamWFlatBufferStepOnDeviceMatchesHost) {
  Registry reg;
  reg.add("w", {301, 77});
  reg.add("b", {77}, false);
  const size_t n = reg.total_numel();
  const AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamW cpu(reg, hp), gpu(reg, hp, Device::cuda);
  EXPECT_EQ(gpu.m().device(), Device::cuda);
  FlatBuffer p(n), dp(n, Device::cuda), dg(n, Device::cuda);
  const std::vector<float> p0 = normal_values(n, 1);
  std::copy(p0.begin(), p0.end(), p.data());
  copy_buffer(dp, p);
  for (int t = 1; t <= 3; ++t) {
    FlatBuffer g(n);
    const std::vector<float> gv = normal_values(n, 20 + uint32_t(t));
    std::copy(gv.begin(), gv.end(), g.data());
    copy_buffer(dg, g);
    const double norm = std::sqrt(sum_squares(dg));
    const double coef = clip_coefficient(norm, 1.0);
    cpu.step(p, g, 1e-2, coef);
    gpu.step(dp, dg, 1e-2, coef);
  }
  EXPECT_EQ(gpu.step_count(), 3);
  FlatBuffer got(n);
  copy_buffer(got, dp);
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(got.data()[i], p.data()[i], 1e-6f * std::max(1.0f, std::fabs(p.data()[i]))) << i;
}

// A step decided on the device (core/step_math.h's passes, train/deferred_steps.h) against
// the same passes on the host runtime: an overflowing step (skipped, the scale backs off),
// then applied steps whose norm is clipped. Decisions, scaler state, t and the LR exactly;
// the norm to fp64 rounding; the parameters to AdamW's fp32 tolerance.
TEST_F(CudaOptim, DeferredStepMatchesTheHostRuntime) {
  Registry reg;
  reg.add("w", {301, 77});
  reg.add("b", {77}, false);
  const size_t n = reg.total_numel();
  StepRule rule;
  rule.scaler = {.dynamic = true, .growth_interval = 2, .max_consecutive_skips = 5};
  rule.schedule = {LrScheduleKind::cosine, 1e-2, 0.1, 1, 10};
  rule.grad_accum_steps = 2;
  rule.weight_decay = 0.1;
  Runtime& cpu = runtime(Device::cpu);
  Runtime& gpu = runtime(Device::cuda);
  struct Side {
    Runtime& rt;
    FlatBuffer p, g, m, v, scalars;  // scalars: a StepCarry then a DeferredStep
    StepCarry* carry() { return reinterpret_cast<StepCarry*>(scalars.data()); }
    DeferredStep* step() {
      return reinterpret_cast<DeferredStep*>(scalars.data() + sizeof(StepCarry) / sizeof(float));
    }
  };
  const size_t scalar_floats = (sizeof(StepCarry) + sizeof(DeferredStep)) / sizeof(float);
  Side host{cpu,
            FlatBuffer(n, cpu),
            FlatBuffer(n, cpu),
            FlatBuffer(n, cpu),
            FlatBuffer(n, cpu),
            FlatBuffer(scalar_floats, cpu)};
  Side dev{gpu,
           FlatBuffer(n, gpu),
           FlatBuffer(n, gpu),
           FlatBuffer(n, gpu),
           FlatBuffer(n, gpu),
           FlatBuffer(scalar_floats, gpu)};
  const std::vector<float> p0 = normal_values(n, 1);
  StepCarry start;
  start.scaler.scale = 1024;
  start.scaler.hysteresis_tracker = 1;
  start.dloss = 512;
  for (Side* s : {&host, &dev}) {
    s->rt.copy(s->p.data(), p0.data(), n * sizeof(float));
    s->rt.copy(s->carry(), &start, sizeof start);
  }
  for (int t = 0; t < 4; ++t) {
    std::vector<float> g = normal_values(n, 30 + uint32_t(t));
    for (float& x : g) x *= 1024;  // scaled gradients, norm well above grad_clip once unscaled
    if (t == 0) g[n / 2] = std::numeric_limits<float>::infinity();
    const double loss_sum = 7.5;
    for (Side* s : {&host, &dev}) {
      s->rt.copy(s->g.data(), g.data(), n * sizeof(float));
      s->rt.zero(s->step(), sizeof(DeferredStep));
      s->rt.copy(&s->step()->loss_sum, &loss_sum, sizeof loss_sum);
      s->rt.unscale_and_flag(s->g.data(), n, s->carry(), s->step());
      s->rt.sum_squares_into(s->g.data(), n, &s->step()->norm_sq);
      s->rt.decide(rule, s->carry(), s->step());
      s->rt.adamw_update_if_applied(reg.tensors(), s->step(), s->p.data(), s->g.data(), s->m.data(),
                                    s->v.data());
    }
    DeferredStep want, got;
    StepCarry want_c, got_c;
    cpu.copy(&want, host.step(), sizeof want);
    gpu.copy(&got, dev.step(), sizeof got);
    cpu.copy(&want_c, host.carry(), sizeof want_c);
    gpu.copy(&got_c, dev.carry(), sizeof got_c);
    EXPECT_EQ(got.bad, t == 0 ? 1u : 0u) << "step " << t;
    EXPECT_EQ(got.bad, want.bad);
    EXPECT_EQ(got.applied, want.applied);
    EXPECT_EQ(got.scale, want.scale);
    EXPECT_EQ(got.lr, want.lr);
    EXPECT_EQ(got_c.scaler, want_c.scaler);
    EXPECT_EQ(got_c.t, want_c.t);
    EXPECT_EQ(got_c.dloss, want_c.dloss);
    if (t > 0) {
      EXPECT_NEAR(got.norm_sq, want.norm_sq, 1024 * 0x1p-24 * want.norm_sq);
    }
  }
  // The overflow halved the scale, two clean steps doubled it back; three steps applied.
  StepCarry end;
  gpu.copy(&end, dev.carry(), sizeof end);
  EXPECT_EQ(end.scaler.scale, start.scaler.scale);
  EXPECT_EQ(end.t, 3);
  FlatBuffer got(n);
  copy_buffer(got, dev.p);
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(got.data()[i], host.p.data()[i],
                1e-6f * std::max(1.0f, std::fabs(host.p.data()[i])))
        << i;
}

#else
TEST_F(CudaOptim, SkippedWithoutCuda) {}
#endif

}  // namespace
}  // namespace ringstep
