// CudaBackend against its CPU twin (CpuBackend), op by op, forward and backward, fp32 and
// bf16, on random inputs of odd sizes; then a whole Gpt step (loss and every gradient).
// Relative error ||gpu - cpu|| / ||cpu|| <= 1e-5 (fp32) or 1e-2 (bf16). Backward outputs
// start from random values, so the += contract is checked too. Labelled `cuda` in ctest;
// every test skips with the reason when no device is usable (CI has none).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/cuda/cuda_backend.h"
#include "core/cuda/cuda_skip.h"
#include "core/cuda/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

std::string skip_reason() { return ringstep::testing::cuda_skip_reason(); }

#ifndef RINGSTEP_HAVE_CUDA
TEST(CudaBackend, SkippedWithoutCuda) { GTEST_SKIP() << skip_reason(); }
#else

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// One tensor on both sides: host bytes for the CPU twin, a device copy for the GPU.
// Stored tensors hold dt values; fp32 tensors floats.
class Twin {
 public:
  Twin(size_t n, DType dt) : n_(n), dt_(dt), host_(n * dtype_size(dt)) {
    dev_ = cuda::device_alloc(host_.size());
  }
  Twin(size_t n, DType dt, float scale, uint32_t seed) : Twin(n, dt) { random(scale, seed); }
  ~Twin() { cuda::device_free(dev_); }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;

  // Random N(0, scale) values, rounded to dt, on both sides.
  Twin& random(float scale, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n_);
    for (float& x : v) x = d(gen);
    if (dt_ == DType::f32)
      std::memcpy(host_.data(), v.data(), host_.size());
    else
      narrow_from_fp32(dt_, v.data(), reinterpret_cast<uint16_t*>(host_.data()), n_);
    cuda::copy_to_device(dev_, host_.data(), host_.size());
    return *this;
  }
  void* cpu() { return host_.data(); }
  void* gpu() { return dev_; }
  float* cpu_f() { return reinterpret_cast<float*>(host_.data()); }
  float* gpu_f() { return static_cast<float*>(dev_); }
  std::vector<float> cpu_values() const { return widen(host_.data()); }
  std::vector<float> gpu_values() const {
    std::vector<char> b(host_.size());
    cuda::copy_to_host(b.data(), dev_, b.size());
    return widen(b.data());
  }

 private:
  std::vector<float> widen(const char* bytes) const {
    std::vector<float> v(n_);
    if (dt_ == DType::f32)
      std::memcpy(v.data(), bytes, v.size() * sizeof(float));
    else
      widen_to_fp32(dt_, reinterpret_cast<const uint16_t*>(bytes), v.data(), n_);
    return v;
  }
  size_t n_;
  DType dt_;
  std::vector<char> host_;
  void* dev_ = nullptr;
};

// A device copy of host ints (the tokens and targets the model uploads: models/gpt.h).
class DeviceInts {
 public:
  explicit DeviceInts(const std::vector<int32_t>& v)
      : dev_(static_cast<int32_t*>(cuda::device_alloc(v.size() * sizeof(int32_t)))) {
    cuda::copy_to_device(dev_, v.data(), v.size() * sizeof(int32_t));
  }
  ~DeviceInts() { cuda::device_free(dev_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  const int32_t* get() const { return dev_; }

 private:
  int32_t* dev_;
};

class CudaBackendOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    dt_ = GetParam();
    cpu_ = make_backend(Device::cpu, dt_);
    gpu_ = make_backend(Device::cuda, dt_);
    cpu_arena_ = std::make_unique<Arena>(size_t(64) << 20);
    gpu_arena_ = std::make_unique<Arena>(size_t(64) << 20, Device::cuda);
  }
  double tol() const { return dt_ == DType::f32 ? 1e-5 : 1e-2; }
  void expect_match(const Twin& t, const char* what) {
    const double e = rel_err(t.gpu_values(), t.cpu_values());
    EXPECT_LE(e, tol()) << what << " (" << name(dt_) << ")";
  }
  // A parameter buffer of P random floats on both sides, given to both set_weights.
  std::unique_ptr<Twin> params(size_t P, uint32_t seed) {
    auto p = std::make_unique<Twin>(P, DType::f32);
    p->random(0.5f, seed);
    cpu_->set_weights(p->cpu_f(), P);
    gpu_->set_weights(p->gpu_f(), P);
    return p;
  }

  DType dt_ = DType::f32;
  std::unique_ptr<Backend> cpu_, gpu_;
  std::unique_ptr<Arena> cpu_arena_, gpu_arena_;
};

TEST_P(CudaBackendOps, Encoder) {
  const int B = 3, T = 17, C = 37, V = 29;
  auto p = params(size_t(V + T) * C, 1);
  const Batch b = MakeBatch(B, T, V, 2);
  const DeviceInts tokens(b.in);
  Twin out(size_t(B) * T * C, dt_);
  cpu_->encoder_forward(out.cpu(), b.in.data(), p->cpu_f(), p->cpu_f() + V * C, B, T, C, *cpu_arena_);
  gpu_->encoder_forward(out.gpu(), tokens.get(), p->gpu_f(), p->gpu_f() + V * C, B, T, C, *gpu_arena_);
  expect_match(out, "encoder out");
  Twin g(size_t(V + T) * C, DType::f32), dout(size_t(B) * T * C, DType::f32);
  g.random(1.0f, 3);
  dout.random(1.0f, 4);
  cpu_->encoder_backward(g.cpu_f(), g.cpu_f() + V * C, dout.cpu_f(), b.in.data(), B, T, C, *cpu_arena_);
  gpu_->encoder_backward(g.gpu_f(), g.gpu_f() + V * C, dout.gpu_f(), tokens.get(), B, T, C, *gpu_arena_);
  expect_match(g, "dwte | dwpe");
}

TEST_P(CudaBackendOps, LayerNorm) {
  const int N = 67, C = 771;
  auto p = params(2 * size_t(C), 5);
  Twin x(size_t(N) * C, dt_, 2.0f, 6), out(size_t(N) * C, dt_);
  Twin mean(N, DType::f32), rstd(N, DType::f32);
  cpu_->layernorm_forward(out.cpu(), mean.cpu_f(), rstd.cpu_f(), x.cpu(), p->cpu_f(), p->cpu_f() + C, N, C, *cpu_arena_);
  gpu_->layernorm_forward(out.gpu(), mean.gpu_f(), rstd.gpu_f(), x.gpu(), p->gpu_f(), p->gpu_f() + C, N, C, *gpu_arena_);
  expect_match(out, "out");
  expect_match(mean, "mean");
  expect_match(rstd, "rstd");
  Twin dinp(size_t(N) * C, DType::f32), dp(2 * size_t(C), DType::f32), dout(size_t(N) * C, DType::f32);
  dinp.random(1.0f, 7);
  dp.random(1.0f, 8);
  dout.random(1.0f, 9);
  // Both sides use the CPU's statistics, so backward is checked on its own.
  cuda::copy_to_device(mean.gpu(), mean.cpu(), N * sizeof(float));
  cuda::copy_to_device(rstd.gpu(), rstd.cpu(), N * sizeof(float));
  cpu_->layernorm_backward(dinp.cpu_f(), dp.cpu_f(), dp.cpu_f() + C, dout.cpu_f(), x.cpu(), p->cpu_f(), mean.cpu_f(), rstd.cpu_f(), N, C, *cpu_arena_);
  gpu_->layernorm_backward(dinp.gpu_f(), dp.gpu_f(), dp.gpu_f() + C, dout.gpu_f(), x.gpu(), p->gpu_f(), mean.gpu_f(), rstd.gpu_f(), N, C, *gpu_arena_);
  expect_match(dinp, "dinp");
  expect_match(dp, "dweight | dbias");
}

TEST_P(CudaBackendOps, LinearWithAndWithoutResidual) {
  const int N = 67, C = 45, OC = 103;
  auto p = params(size_t(OC) * C + OC, 10);
  const float* wc = p->cpu_f();
  const float* wg = p->gpu_f();
  Twin x(size_t(N) * C, dt_, 1.0f, 11), res(size_t(N) * OC, dt_, 1.0f, 12);
  Twin out(size_t(N) * OC, dt_), out_res(size_t(N) * OC, dt_);
  cpu_->linear_forward(out.cpu(), x.cpu(), wc, wc + OC * C, nullptr, N, C, OC, *cpu_arena_);
  gpu_->linear_forward(out.gpu(), x.gpu(), wg, wg + OC * C, nullptr, N, C, OC, *gpu_arena_);
  cpu_->linear_forward(out_res.cpu(), x.cpu(), wc, wc + OC * C, res.cpu(), N, C, OC, *cpu_arena_);
  gpu_->linear_forward(out_res.gpu(), x.gpu(), wg, wg + OC * C, res.gpu(), N, C, OC, *gpu_arena_);
  expect_match(out, "out");
  expect_match(out_res, "out + residual");

  Twin dinp(size_t(N) * C, DType::f32), dw(size_t(OC) * C + OC, DType::f32), dout(size_t(N) * OC, DType::f32);
  dinp.random(1.0f, 13);
  dw.random(1.0f, 14);
  dout.random(1.0f, 15);
  cpu_->linear_backward(dinp.cpu_f(), dw.cpu_f(), dw.cpu_f() + OC * C, dout.cpu_f(), x.cpu(), wc, N, C, OC, *cpu_arena_);
  gpu_->linear_backward(dinp.gpu_f(), dw.gpu_f(), dw.gpu_f() + OC * C, dout.gpu_f(), x.gpu(), wg, N, C, OC, *gpu_arena_);
  expect_match(dinp, "dinp");
  expect_match(dw, "dweight | dbias");
  // dinp and dbias may be null.
  cpu_->linear_backward(nullptr, dw.cpu_f(), nullptr, dout.cpu_f(), x.cpu(), wc, N, C, OC, *cpu_arena_);
  gpu_->linear_backward(nullptr, dw.gpu_f(), nullptr, dout.gpu_f(), x.gpu(), wg, N, C, OC, *gpu_arena_);
  expect_match(dw, "dweight again, no dinp or dbias");
}

// A linear layer without a residual whose bias is 16-byte aligned takes cuBLASLt's bias
// epilogue (or its fallback kernel): the same values as the CPU op. Repeating a step's
// products builds no further cuBLASLt plan.
TEST_P(CudaBackendOps, LinearBiasEpilogueAndCachedPlans) {
  const int N = 67, C = 48, OC = 100;  // OC * C floats: the bias starts 16-byte aligned
  auto p = params(size_t(OC) * C + OC, 20);
  const float* wc = p->cpu_f();
  const float* wg = p->gpu_f();
  Twin x(size_t(N) * C, dt_, 1.0f, 21), out(size_t(N) * OC, dt_);
  Twin dinp(size_t(N) * C, DType::f32), dw(size_t(OC) * C + OC, DType::f32),
      dout(size_t(N) * OC, DType::f32, 1.0f, 22);
  auto products = [&] {
    gpu_->linear_forward(out.gpu(), x.gpu(), wg, wg + OC * C, nullptr, N, C, OC, *gpu_arena_);
    gpu_->linear_backward(dinp.gpu_f(), dw.gpu_f(), dw.gpu_f() + OC * C, dout.gpu_f(), x.gpu(), wg,
                          N, C, OC, *gpu_arena_);
  };
  products();
  const size_t built = cuda::gemm_plans_built(*gpu_);
  EXPECT_GE(built, 3u);  // forward (with or without its epilogue), dinp, dweight
  EXPECT_LE(built, 4u);  // plus the plain forward where the epilogue has no algorithm
  products();
  EXPECT_EQ(cuda::gemm_plans_built(*gpu_), built);
  cpu_->linear_forward(out.cpu(), x.cpu(), wc, wc + OC * C, nullptr, N, C, OC, *cpu_arena_);
  expect_match(out, "out with the bias epilogue");
}

// The MLP's product + GELU and the gradient through them: the fused calls (cuBLASLt's
// GELU_AUX_BIAS and, fp32, DGELU epilogues, or their fallbacks) against the CPU's pair of
// ops, forward (the GELU's input and output) and backward (dinp, dweight, dbias). FC 128
// and 104 take the epilogues (their leading dimension is a multiple of 8), FC 90 the
// fallback.
TEST_P(CudaBackendOps, LinearGeluFusedMatchesTheTwoOps) {
  for (const int FC : {128, 104, 90}) {
    const int N = 67, C = 48;
    auto p = params(size_t(FC) * C + FC + size_t(C) * FC + C, 40);
    const float* wc = p->cpu_f();
    const float* wg = p->gpu_f();
    const size_t proj = size_t(FC) * C + FC;  // the projection's weight (C, FC), then its bias
    Twin x(size_t(N) * C, dt_, 1.0f, 41), pre(size_t(N) * FC, dt_), out(size_t(N) * FC, dt_);
    cpu_->linear_gelu_forward(out.cpu(), pre.cpu(), x.cpu(), wc, wc + FC * C, N, C, FC,
                              *cpu_arena_);
    const size_t unfound = cuda::gemm_plans_without_algorithm(*gpu_);
    gpu_->linear_gelu_forward(out.gpu(), pre.gpu(), x.gpu(), wg, wg + FC * C, N, C, FC,
                              *gpu_arena_);
    // What this cuBLASLt did, for the device check's log (tools/gpu_check.sh).
    std::printf("[gelu-epilogue] %s FC %d forward: %s\n", name(dt_), FC,
                FC % 8 != 0 ? "two ops (leading dimension not 8k)"
                : cuda::gemm_plans_without_algorithm(*gpu_) > unfound
                    ? "two ops (no cuBLASLt algorithm)"
                    : "fused (GELU_AUX_BIAS)");
    expect_match(pre, "the GELU's input");
    expect_match(out, "GELU(inp W^T + b)");

    Twin dinp(size_t(N) * FC, DType::f32), dw(size_t(C) * FC + C, DType::f32),
        dout(size_t(N) * C, DType::f32, 1.0f, 42);
    dw.random(1.0f, 43);
    cpu_->linear_backward_gelu(dinp.cpu_f(), dw.cpu_f(), dw.cpu_f() + C * FC, dout.cpu_f(),
                               out.cpu(), wc + proj, pre.cpu(), N, FC, C, *cpu_arena_);
    gpu_->linear_backward_gelu(dinp.gpu_f(), dw.gpu_f(), dw.gpu_f() + C * FC, dout.gpu_f(),
                               out.gpu(), wg + proj, pre.gpu(), N, FC, C, *gpu_arena_);
    expect_match(dinp, "dinp through GELU'");
    expect_match(dw, "dweight | dbias");
  }
}

TEST_P(CudaBackendOps, Logits) {
  const int N = 67, C = 45, V = 1001;
  auto p = params(size_t(V) * C, 16);
  Twin x(size_t(N) * C, dt_, 1.0f, 17), logits(size_t(N) * V, DType::f32);
  cpu_->logits_forward(logits.cpu_f(), x.cpu(), p->cpu_f(), N, C, V, V, *cpu_arena_);
  gpu_->logits_forward(logits.gpu_f(), x.gpu(), p->gpu_f(), N, C, V, V, *gpu_arena_);
  expect_match(logits, "logits");
  // A padded vocabulary: 1001 rows computed, the last 41 masked to -inf on both sides.
  const int vocab = 960;
  cpu_->logits_forward(logits.cpu_f(), x.cpu(), p->cpu_f(), N, C, V, vocab, *cpu_arena_);
  gpu_->logits_forward(logits.gpu_f(), x.gpu(), p->gpu_f(), N, C, V, vocab, *gpu_arena_);
  const std::vector<float> g = logits.gpu_values(), c = logits.cpu_values();
  std::vector<float> g_real, c_real;
  size_t masked = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (int(i % V) < vocab) {
      g_real.push_back(g[i]), c_real.push_back(c[i]);
      continue;
    }
    const float ninf = -std::numeric_limits<float>::infinity();
    masked += g[i] == ninf && c[i] == ninf ? 1 : 0;
  }
  EXPECT_EQ(masked, size_t(N) * (V - vocab));
  EXPECT_LE(rel_err(g_real, c_real), tol()) << "padded logits";
}

// Attention, fused on the GPU (core/cuda/flash_attention.h; the kernels alone against their
// host twin: flash_attention_cudatest.cpp): out against CpuBackend's, and dqkv, each side
// from its own forward (the GPU saves the LSE, the CPU the probabilities).
void attention_case(Backend& cpu, Backend& gpu, Arena& ca, Arena& ga, DType dt, int B, int T, int C,
                    int NH, double tol) {
  SCOPED_TRACE(::testing::Message()
               << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH << " hs=" << C / NH);
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
  ASSERT_EQ(gpu.attention_state_bytes(B, T, NH), size_t(B) * NH * T * sizeof(float));
  Twin qkv(nqkv, dt), out(nout, dt), lse(size_t(B) * NH * T, DType::f32);
  std::vector<char> att(cpu.attention_state_bytes(B, T, NH));
  qkv.random(1.0f, 18);
  cpu.attention_forward(out.cpu(), att.data(), qkv.cpu(), B, T, C, NH, ca);
  gpu.attention_forward(out.gpu(), lse.gpu(), qkv.gpu(), B, T, C, NH, ga);
  EXPECT_LE(rel_err(out.gpu_values(), out.cpu_values()), tol) << "out";
  Twin dqkv(nqkv, DType::f32), dout(nout, DType::f32);
  dqkv.random(1.0f, 19);
  dout.random(1.0f, 20);
  cpu.attention_backward(dqkv.cpu_f(), dout.cpu_f(), qkv.cpu(), out.cpu(), att.data(), B, T, C, NH,
                         ca);
  gpu.attention_backward(dqkv.gpu_f(), dout.gpu_f(), qkv.gpu(), out.gpu(), lse.gpu(), B, T, C, NH,
                         ga);
  EXPECT_LE(rel_err(dqkv.gpu_values(), dqkv.cpu_values()), tol) << "dqkv";
}

TEST_P(CudaBackendOps, AttentionHeadSize16) {
  attention_case(*cpu_, *gpu_, *cpu_arena_, *gpu_arena_, dt_, 2, 67, 48, 3, tol());
}

TEST_P(CudaBackendOps, AttentionOddHeadSizeAndLength) {  // hs = 5, padded to 16
  attention_case(*cpu_, *gpu_, *cpu_arena_, *gpu_arena_, dt_, 3, 33, 15, 3, tol());
}

TEST_P(CudaBackendOps, AttentionOneToken) {
  attention_case(*cpu_, *gpu_, *cpu_arena_, *gpu_arena_, dt_, 2, 1, 12, 3, tol());
}

TEST_P(CudaBackendOps, AttentionHeadSizes32To128AcrossBlocks) {
  for (const auto& [T, C, NH] : {std::array{63, 96, 3}, std::array{65, 128, 2},
                                 std::array{130, 128, 1}, std::array{200, 192, 3}})
    attention_case(*cpu_, *gpu_, *cpu_arena_, *gpu_arena_, dt_, 2, T, C, NH, tol());
}

TEST_P(CudaBackendOps, AttentionGpt2Heads) {  // hs 64, 16 blocks of 64 rows
  attention_case(*cpu_, *gpu_, *cpu_arena_, *gpu_arena_, dt_, 2, 1024, 768, 12, tol());
}

TEST_P(CudaBackendOps, AttentionRefusesHeadSizesBeyond128) {
  Arena counter = Arena::make_counting();
  EXPECT_THROW(gpu_->attention_forward(nullptr, nullptr, nullptr, 1, 8, 258, 2, counter),
               InputError);
  EXPECT_THROW(
      gpu_->attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 258, 2, counter),
      InputError);
}

TEST_P(CudaBackendOps, Gelu) {
  const int N = 67, C = 771;
  Twin x(size_t(N) * C, dt_, 3.0f, 21), out(size_t(N) * C, dt_);
  cpu_->gelu_forward(out.cpu(), x.cpu(), N, C, *cpu_arena_);
  gpu_->gelu_forward(out.gpu(), x.gpu(), N, C, *gpu_arena_);
  expect_match(out, "gelu");
  Twin d(size_t(N) * C, DType::f32);
  d.random(1.0f, 22);
  cpu_->gelu_backward(d.cpu_f(), x.cpu(), N, C, *cpu_arena_);
  gpu_->gelu_backward(d.gpu_f(), x.gpu(), N, C, *gpu_arena_);
  expect_match(d, "gelu backward");
}

TEST_P(CudaBackendOps, CrossEntropy) {
  const int N = 67, V = 1001;
  Twin logits(size_t(N) * V, DType::f32), probs(size_t(N) * V, DType::f32), losses(N, DType::f32);
  logits.random(3.0f, 23);
  const Batch b = MakeBatch(1, N, V, 24);
  const DeviceInts targets(b.tg);
  // The loss adds into a sum that already holds 0.25 (a second micro-batch's).
  const double start = 0.25;
  double lc = start, lg = 0;
  double* dev_sum = static_cast<double*>(cuda::device_alloc(sizeof(double)));
  cuda::copy_to_device(dev_sum, &start, sizeof start);
  cpu_->crossentropy_forward(losses.cpu_f(), probs.cpu_f(), logits.cpu_f(), b.tg.data(), N, V, &lc, *cpu_arena_);
  gpu_->crossentropy_forward(losses.gpu_f(), probs.gpu_f(), logits.gpu_f(), targets.get(), N, V, dev_sum, *gpu_arena_);
  cuda::copy_to_host(&lg, dev_sum, sizeof lg);
  cuda::device_free(dev_sum);
  EXPECT_NEAR(lg, lc, 1e-5 * std::fabs(lc - start));
  expect_match(probs, "probs");
  expect_match(losses, "losses");
  Twin dlogits(size_t(N) * V, DType::f32);
  dlogits.random(1e-3f, 25);
  const float seed = 0.37f;
  float* dev_seed = static_cast<float*>(cuda::device_alloc(sizeof(float)));
  cuda::copy_to_device(dev_seed, &seed, sizeof seed);
  cpu_->crossentropy_backward(dlogits.cpu_f(), probs.cpu_f(), b.tg.data(), &seed, N, V, *cpu_arena_);
  gpu_->crossentropy_backward(dlogits.gpu_f(), probs.gpu_f(), targets.get(), dev_seed, N, V, *gpu_arena_);
  cuda::device_synchronize();
  cuda::device_free(dev_seed);
  expect_match(dlogits, "dlogits");
}

TEST_P(CudaBackendOps, CountingArenaTouchesNothing) {
  // Null pointers everywhere: a counting op that launched anything would fault or fail.
  Arena counter = Arena::make_counting();
  const int B = 2, T = 9, C = 12, NH = 3, N = B * T;
  gpu_->encoder_forward(nullptr, nullptr, nullptr, nullptr, B, T, C, counter);
  gpu_->attention_forward(nullptr, nullptr, nullptr, B, T, C, NH, counter);
  gpu_->attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, B, T, C, NH, counter);
  gpu_->linear_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, C, C, counter);
  gpu_->crossentropy_forward(nullptr, nullptr, nullptr, nullptr, N, 5, nullptr, counter);
  cuda::device_synchronize();
  EXPECT_GT(counter.peak_bytes(), 0u);
  EXPECT_EQ(counter.used_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBackendOps,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(name(info.param)); });

#endif  // RINGSTEP_HAVE_CUDA

}  // namespace
}  // namespace ringstep
