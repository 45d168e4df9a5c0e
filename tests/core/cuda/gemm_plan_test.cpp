// The CUDA backend's layout math, checked on the CPU (no GPU needed): every GemmPlan run
// through gemm_reference (the column-major semantics cuBLASLt is given) must reproduce the
// row-major CPU op it stands for, and the per-head index maps must compose with them into
// attention exactly as core/cpu/ops.h computes it. Odd sizes throughout, so a swapped m/n
// or ld shows up. Also: operand alignment and the operand spans stay inside the buffers.
#include "core/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu/ops.h"
#include "core/cuda/attention_layout.h"

namespace ringstep::cuda {
namespace {

std::vector<float> rnd(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << "i=" << i;
}

constexpr int N = 7, C = 13, OC = 5;

TEST(GemmPlan, LinearForwardIsInpTimesWeightTransposed) {
  const auto inp = rnd(N * C, 1), w = rnd(OC * C, 2);
  std::vector<float> out(N * OC, NAN);
  const GemmPlan p = plan_linear_forward(N, C, OC);
  gemm_reference(p, w.data(), inp.data(), out.data());  // A = weight, B = inp
  std::vector<double> want(N * OC);
  const auto di = dbl(inp), dw = dbl(w);
  cpu::matmul_forward<double>(want.data(), di.data(), dw.data(), nullptr, N, C, OC);
  expect_near_all(out, want);
  EXPECT_EQ(span_a(p), size_t(OC) * C);
  EXPECT_EQ(span_b(p), size_t(N) * C);
  EXPECT_EQ(span_c(p), size_t(N) * OC);
}

TEST(GemmPlan, LinearBackwardWritesDinpAndAddsDweight) {
  const auto inp = rnd(N * C, 3), w = rnd(OC * C, 4), dout = rnd(N * OC, 5);
  std::vector<float> dinp(N * C, NAN);  // written: the NaN must not be read
  auto dw = rnd(OC * C, 7);             // += onto nonzero values
  std::vector<double> want_dinp(N * C);
  auto want_dw = dbl(dw);
  const auto di = dbl(inp), dwt = dbl(w), dd = dbl(dout);
  cpu::matmul_backward<double>(want_dinp.data(), want_dw.data(), nullptr, dd.data(), di.data(),
                               dwt.data(), N, C, OC);
  const GemmPlan pi = plan_linear_dinp(N, C, OC), pw = plan_linear_dweight(N, C, OC);
  gemm_reference(pi, w.data(), dout.data(), dinp.data());
  gemm_reference(pw, inp.data(), dout.data(), dw.data());
  expect_near_all(dinp, want_dinp);
  expect_near_all(dw, want_dw);
  EXPECT_EQ(span_a(pi), size_t(OC) * C);
  EXPECT_EQ(span_b(pi), size_t(N) * OC);
  EXPECT_EQ(span_c(pi), size_t(N) * C);
  EXPECT_EQ(span_a(pw), size_t(N) * C);
  EXPECT_EQ(span_b(pw), size_t(N) * OC);
  EXPECT_EQ(span_c(pw), size_t(OC) * C);
}

// Attention the way CudaBackend runs it, with the kernels' per-row math written out here:
// split heads, scores = plan, causal softmax, values = plan, merge heads.
struct HostAttention {
  int B, T, NH, hs;
  size_t nh() const { return size_t(B) * NH * T * hs; }
  size_t ntt() const { return size_t(B) * NH * T * T; }
  float scale() const { return 1.0f / std::sqrt(float(hs)); }

  std::vector<float> split(const std::vector<float>& qkv, int part) const {
    std::vector<float> h(nh());
    for (size_t i = 0; i < h.size(); ++i) h[i] = qkv[heads_to_qkv(i, part, T, NH, hs)];
    return h;
  }
  void forward(std::vector<float>& out, std::vector<float>& att,
               const std::vector<float>& qkv) const {
    const auto q = split(qkv, 0), k = split(qkv, 1), v = split(qkv, 2);
    std::vector<float> scores(ntt()), oh(nh());
    const int BH = B * NH;
    gemm_reference(plan_attention_scores(BH, T, hs), k.data(), q.data(), scores.data());
    att.assign(ntt(), NAN);
    for (size_t r = 0; r < size_t(BH) * T; ++r) {
      const int i = int(r % T);
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j <= i; ++j) mx = std::max(mx, double(scale() * scores[r * T + j]));
      for (int j = 0; j <= i; ++j) sum += std::exp(scale() * scores[r * T + j] - mx);
      for (int j = 0; j < T; ++j)
        att[r * T + j] = j <= i ? float(std::exp(scale() * scores[r * T + j] - mx) / sum) : 0.0f;
    }
    gemm_reference(plan_attention_values(BH, T, hs), v.data(), att.data(), oh.data());
    out.assign(size_t(B) * T * NH * hs, NAN);
    for (size_t i = 0; i < out.size(); ++i) out[i] = oh[btc_to_heads(i, T, NH, hs)];
  }
  void backward(std::vector<float>& dqkv, const std::vector<float>& dout,
                const std::vector<float>& qkv, const std::vector<float>& att) const {
    const auto q = split(qkv, 0), k = split(qkv, 1), v = split(qkv, 2);
    const int BH = B * NH;
    std::vector<float> doh(nh()), datt(ntt()), ds(ntt()), dq(nh()), dk(nh()), dv(nh());
    for (size_t i = 0; i < dout.size(); ++i) doh[btc_to_heads(i, T, NH, hs)] = dout[i];
    gemm_reference(plan_attention_datt(BH, T, hs), v.data(), doh.data(), datt.data());
    gemm_reference(plan_attention_dv(BH, T, hs), doh.data(), att.data(), dv.data());
    for (size_t r = 0; r < size_t(BH) * T; ++r) {
      const int i = int(r % T);
      double dot = 0;
      for (int j = 0; j <= i; ++j) dot += double(att[r * T + j]) * datt[r * T + j];
      for (int j = 0; j < T; ++j)
        ds[r * T + j] = j <= i ? float(scale() * att[r * T + j] * (datt[r * T + j] - dot)) : 0.0f;
    }
    gemm_reference(plan_attention_dq(BH, T, hs), k.data(), ds.data(), dq.data());
    gemm_reference(plan_attention_dk(BH, T, hs), q.data(), ds.data(), dk.data());
    for (size_t i = 0; i < nh(); ++i) {
      dqkv[heads_to_qkv(i, 0, T, NH, hs)] += dq[i];
      dqkv[heads_to_qkv(i, 1, T, NH, hs)] += dk[i];
      dqkv[heads_to_qkv(i, 2, T, NH, hs)] += dv[i];
    }
  }
};

TEST(GemmPlan, AttentionThroughHeadsMatchesCpuOps) {
  for (const auto [B, T, NH, hs] : {std::array{2, 7, 3, 4}, std::array{1, 33, 2, 5},
                                    std::array{3, 1, 1, 3}}) {
    SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " NH=" << NH << " hs=" << hs);
    const int Cm = NH * hs;
    const HostAttention ha{B, T, NH, hs};
    const auto qkv = rnd(size_t(B) * T * 3 * Cm, 8), dout = rnd(size_t(B) * T * Cm, 9);
    std::vector<float> out, att;
    ha.forward(out, att, qkv);
    std::vector<double> want_out(out.size()), want_att(att.size());
    const auto dq = dbl(qkv), dd = dbl(dout);
    cpu::attention_forward<double>(want_out.data(), want_att.data(), dq.data(), B, T, Cm, NH);
    expect_near_all(out, want_out);
    expect_near_all(att, want_att);

    auto dqkv = rnd(qkv.size(), 10);
    auto want_dqkv = dbl(dqkv);
    cpu::attention_backward<double>(want_dqkv.data(), dd.data(), dq.data(), want_att.data(), B, T,
                                    Cm, NH);
    ha.backward(dqkv, dout, qkv, att);
    expect_near_all(dqkv, want_dqkv);
  }
}

TEST(GemmPlan, AttentionSpansStayInsideTheHeadTensors) {
  const int BH = 6, T = 9, hs = 5;
  const size_t nh = size_t(BH) * T * hs, ntt = size_t(BH) * T * T;
  for (const GemmPlan& p : {plan_attention_scores(BH, T, hs), plan_attention_datt(BH, T, hs)}) {
    EXPECT_EQ(span_a(p), nh);
    EXPECT_EQ(span_b(p), nh);
    EXPECT_EQ(span_c(p), ntt);
  }
  for (const GemmPlan& p : {plan_attention_values(BH, T, hs), plan_attention_dq(BH, T, hs)}) {
    EXPECT_EQ(span_a(p), nh);
    EXPECT_EQ(span_b(p), ntt);
    EXPECT_EQ(span_c(p), nh);
  }
  EXPECT_EQ(span_a(plan_attention_dv(BH, T, hs)), nh);
  EXPECT_EQ(span_b(plan_attention_dv(BH, T, hs)), ntt);
  EXPECT_EQ(span_a(plan_attention_dk(BH, T, hs)), nh);
  EXPECT_EQ(span_b(plan_attention_dk(BH, T, hs)), ntt);
}

TEST(AttentionLayout, MapsAreMutuallyInverseBijections) {
  const int B = 2, T = 5, NH = 3, hs = 4, Cm = NH * hs;
  const size_t n = size_t(B) * T * Cm;
  std::vector<int> hit(n, 0), hit_qkv(3 * n, 0);
  for (size_t i = 0; i < n; ++i) {
    const size_t h = btc_to_heads(i, T, NH, hs);
    ASSERT_LT(h, n);
    ++hit[h];
    for (int part = 0; part < 3; ++part) {
      const size_t at = heads_to_qkv(h, part, T, NH, hs);
      ASSERT_LT(at, 3 * n);
      ++hit_qkv[at];
      // Same (b, t, c): the qkv offset minus the part's C is the (B, T, 3C) image of i.
      EXPECT_EQ(at, (i / Cm) * 3 * Cm + size_t(part) * Cm + i % Cm);
    }
  }
  for (int c : hit) EXPECT_EQ(c, 1);
  for (int c : hit_qkv) EXPECT_EQ(c, 1);
}

TEST(GemmPlan, OperandAlignmentIsTheLargestCommonPowerOfTwo) {
  alignas(256) static char buf[1024];
  EXPECT_EQ(operand_alignment(buf, 1, 0), 64u);  // capped: the arena's alignment
  EXPECT_EQ(operand_alignment(buf + 128, 1, 0), 64u);
  EXPECT_EQ(operand_alignment(buf + 6, 1, 0), 2u);
  EXPECT_EQ(operand_alignment(buf, 4, 8 * 2), 16u);  // bf16 head of hs = 8: stride 16 bytes
  EXPECT_EQ(operand_alignment(buf + 32, 4, 1024), 32u);
  EXPECT_EQ(operand_alignment(buf, 1, 6), 64u);      // stride ignored without batches
}

}  // namespace
}  // namespace ringstep::cuda
