// CUDA kernels against references: GELU and LayerNorm against the formulas evaluated in
// double here, conversions bit for bit against core/dtype.h. Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda/device.h"
#include "core/dtype.h"

#ifdef RINGSTEP_HAVE_CUDA
#include "core/cuda/ops_cuda.h"
#endif

namespace ringstep {
namespace {

TEST(CudaDevice, AvailabilityQueryNeverAborts) {
  const bool available = cuda_available();
  EXPECT_EQ(available, !cuda_device_name().empty());
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef RINGSTEP_HAVE_CUDA
    GTEST_SKIP() << "built without the CUDA backend (RINGSTEP_HAVE_CUDA unset)";
#else
    if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device or driver";
#endif
  }
};

#ifdef RINGSTEP_HAVE_CUDA

// |got - want| <= 1e-5 relative, with an absolute floor of 1e-5 for values near zero.
void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << "i=" << i;
  }
}

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

constexpr double kGeluScale = 0.79788456080286535588;  // sqrt(2 / pi)

TEST_F(CudaOps, GeluForwardMatchesFormula) {
  const std::vector<float> x = random_floats(100003, 3.0f, 1);
  std::vector<float> y(x.size());
  cuda::gelu_forward_host(y.data(), x.data(), x.size());
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    want[i] = 0.5 * v * (1 + std::tanh(kGeluScale * (v + 0.044715 * v * v * v)));
  }
  expect_close(y, want);
}

TEST_F(CudaOps, GeluBackwardAccumulatesDerivative) {
  const std::vector<float> x = random_floats(100003, 3.0f, 2);
  const std::vector<float> dout = random_floats(x.size(), 1.0f, 3);
  std::vector<float> dinp = random_floats(x.size(), 1.0f, 4);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double t = std::tanh(kGeluScale * (v + 0.044715 * v * v * v));
    const double grad =
        0.5 * (1 + t) + 0.5 * v * (1 - t * t) * kGeluScale * (1 + 3 * 0.044715 * v * v);
    want[i] = dinp[i] + grad * dout[i];
  }
  cuda::gelu_backward_host(dinp.data(), x.data(), dout.data(), x.size());
  expect_close(dinp, want);
}

TEST_F(CudaOps, LayerNormForwardMatchesFormula) {
  const int N = 67, C = 771;  // neither a multiple of the warp or block size
  const std::vector<float> x = random_floats(size_t(N) * C, 2.0f, 5);
  const std::vector<float> w = random_floats(C, 1.0f, 6);
  const std::vector<float> b = random_floats(C, 1.0f, 7);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  cuda::layernorm_forward_host(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C);
  std::vector<double> want_out(x.size()), want_mean(N), want_rstd(N);
  for (int n = 0; n < N; ++n) {
    const float* row = &x[size_t(n) * C];
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += row[c];
    m /= C;
    for (int c = 0; c < C; ++c) var += (row[c] - m) * (row[c] - m);
    const double s = 1 / std::sqrt(var / C + 1e-5);
    for (int c = 0; c < C; ++c) want_out[size_t(n) * C + c] = (row[c] - m) * s * w[c] + b[c];
    want_mean[n] = m;
    want_rstd[n] = s;
  }
  expect_close(out, want_out);
  expect_close(mean, want_mean);
  expect_close(rstd, want_rstd);
}

TEST_F(CudaOps, ConversionsBitExactWithCpu) {
  std::mt19937 gen(8);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<uint32_t> exp(127 - 30, 127 + 17);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                               0x7FC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x00000001u,
                               0x33000000u, 0x477FF000u, 0x477FEFFFu, 0x3F808000u,
                               0x387FE000u, 0x7F7FFFFFu, 0x00018000u, 0x7F80FFFFu};
  std::vector<float> in(1 << 20);
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t b = any(gen);
    if (i < 16)
      b = specials[i];
    else if (i % 2 == 0)
      b = (b & 0x807FFFFFu) | (exp(gen) << 23);
    in[i] = std::bit_cast<float>(b);
  }
  std::vector<uint16_t> h(in.size()), bf(in.size());
  cuda::fp32_to_fp16_host(in.data(), h.data(), in.size());
  cuda::fp32_to_bf16_host(in.data(), bf.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(h[i], fp32_to_fp16(in[i])) << std::hex << std::bit_cast<uint32_t>(in[i]);
    ASSERT_EQ(bf[i], fp32_to_bf16(in[i])) << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

#else

TEST_F(CudaOps, KernelsMatchCpu) {}  // reports the skip reason from SetUp

#endif

}  // namespace
}  // namespace ringstep
