// The CUDA backend's GEMM layout math, checked on the CPU (no GPU needed): every GemmPlan
// run through gemm_reference (the column-major semantics cuBLASLt is given) must reproduce
// the row-major CPU op it stands for. Odd sizes throughout, so a swapped m/n or ld shows
// up. Also: operand alignment and the operand spans stay inside the buffers.
#include "core/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cpu/ops.h"
#include "core/normal_values.h"

namespace ringstep::cuda {
namespace {

using ringstep::testing::normal_values;

std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want[i]))) << "i=" << i;
}

constexpr int N = 7, C = 13, OC = 5;

TEST(GemmPlan, LinearForwardIsInpTimesWeightTransposed) {
  const auto inp = normal_values(N * C, 1), w = normal_values(OC * C, 2);
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
  const auto inp = normal_values(N * C, 3), w = normal_values(OC * C, 4),
             dout = normal_values(N * OC, 5);
  std::vector<float> dinp(N * C, NAN);  // written: the NaN must not be read
  auto dw = normal_values(OC * C, 7);   // += onto nonzero values
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

TEST(GemmPlan, OperandAlignmentIsTheLargestCommonPowerOfTwo) {
  alignas(256) static char buf[1024];
  EXPECT_EQ(operand_alignment(buf, 1, 0), 64u);  // capped: the arena's alignment
  EXPECT_EQ(operand_alignment(buf + 128, 1, 0), 64u);
  EXPECT_EQ(operand_alignment(buf + 6, 1, 0), 2u);
  EXPECT_EQ(operand_alignment(buf, 4, 8 * 2), 16u);  // bf16 head of hs = 8: stride 16 bytes
  EXPECT_EQ(operand_alignment(buf + 32, 4, 1024), 32u);
  EXPECT_EQ(operand_alignment(buf, 1, 6), 64u);  // stride ignored without batches
}

// The plan cache's key: beta (a per-call scalar) is not part of it; every field that
// cuBLASLt's descriptors or algorithm depend on is, so two products differing in any one of
// them never share a plan.
TEST(GemmKey, BetaIsNotPartOfTheKeyEveryOtherFieldIs) {
  alignas(64) static char buf[256];
  const GemmPlan base = plan_linear_dweight(N, C, OC);  // beta 1
  auto key = [&](const GemmPlan& p, int ab = 0, int cd = 0, bool tf32 = false,
                 Epilogue e = Epilogue::none, size_t a_offset = 0) {
    return make_gemm_key(p, ab, 4, cd, 4, tf32, e, buf + a_offset, buf, buf);
  };
  GemmPlan zero_beta = base;
  zero_beta.beta = 0.0f;
  EXPECT_EQ(key(base), key(zero_beta));
  EXPECT_EQ(GemmKeyHash{}(key(base)), GemmKeyHash{}(key(zero_beta)));

  std::vector<GemmKey> variants = {key(base)};
  auto vary = [&](auto&& change) {
    GemmPlan p = base;
    change(p);
    variants.push_back(key(p));
  };
  vary([](GemmPlan& p) { p.trans_a = !p.trans_a; });
  vary([](GemmPlan& p) { p.trans_b = !p.trans_b; });
  vary([](GemmPlan& p) { ++p.m; });
  vary([](GemmPlan& p) { ++p.n; });
  vary([](GemmPlan& p) { ++p.k; });
  vary([](GemmPlan& p) { ++p.lda; });
  vary([](GemmPlan& p) { ++p.ldb; });
  vary([](GemmPlan& p) { ++p.ldc; });
  vary([](GemmPlan& p) { p.batch = 2; });
  vary([](GemmPlan& p) { p.batch = 2, p.stride_a = 8; });
  vary([](GemmPlan& p) { p.batch = 2, p.stride_b = 8; });
  vary([](GemmPlan& p) { p.batch = 2, p.stride_c = 8; });
  variants.push_back(key(base, 14));  // CUDA_R_16BF operands
  variants.push_back(key(base, 0, 14));
  variants.push_back(key(base, 0, 0, true));
  variants.push_back(key(base, 0, 0, false, Epilogue::bias));
  variants.push_back(key(base, 0, 0, false, Epilogue::none, 4));  // A 4-byte aligned
  for (size_t i = 0; i < variants.size(); ++i)
    for (size_t j = i + 1; j < variants.size(); ++j) {
      EXPECT_FALSE(variants[i] == variants[j]) << i << " vs " << j;
      EXPECT_NE(GemmKeyHash{}(variants[i]), GemmKeyHash{}(variants[j])) << i << " vs " << j;
    }
}

}  // namespace
}  // namespace ringstep::cuda
