// The CUDA backend's GEMM layout math, checked on the CPU (no GPU needed): every GemmPlan
// run through gemm_reference (the column-major semantics cuBLASLt is given) must reproduce
// the row-major CPU op it stands for. Odd sizes throughout, so a swapped m/n or ld shows
// up. Also: operand alignment and the operand spans stay inside the buffers.
#include "core/cuda/gemm_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
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

// The MLP's first product with the GELU_AUX_BIAS epilogue: AUX is the CPU's linear output
// (the GELU's input, what backward reads) and C its GELU, as linear_forward then
// gelu_forward give them. OC 16: the epilogue's leading dimension is a multiple of 8.
TEST(GemmPlan, GeluAuxBiasEpilogueIsLinearThenGelu) {
  constexpr int FC = 16;
  const auto inp = normal_values(N * C, 11), w = normal_values(FC * C, 12),
             bias = normal_values(FC, 13);
  std::vector<float> out(N * FC, NAN), aux(N * FC, NAN);
  gemm_reference(plan_linear_forward(N, C, FC), Epilogue::gelu_aux_bias, w.data(), inp.data(),
                 out.data(), bias.data(), aux.data());
  std::vector<double> pre(N * FC), want(N * FC);
  const auto di = dbl(inp), dw = dbl(w), db = dbl(bias);
  cpu::matmul_forward<double>(pre.data(), di.data(), dw.data(), db.data(), N, C, FC);
  cpu::gelu_forward<double>(want.data(), pre.data(), pre.size());
  expect_near_all(aux, pre);
  expect_near_all(out, want);
  // The bias epilogue alone is the linear layer with its bias.
  gemm_reference(plan_linear_forward(N, C, FC), Epilogue::bias, w.data(), inp.data(), out.data(),
                 bias.data(), nullptr);
  expect_near_all(out, pre);
}

// The MLP's output projection backward with the DGELU epilogue: dinp is the CPU's
// linear_backward dinp times GELU' of the first product's output (gelu_backward in place).
TEST(GemmPlan, DgeluEpilogueIsDinpThenGeluBackward) {
  constexpr int FC = 16;  // the projection's input width (the GELU's), a multiple of 8
  const auto w = normal_values(OC * FC, 14), dout = normal_values(N * OC, 15),
             gelu_in = normal_values(N * FC, 16);
  std::vector<float> dinp(N * FC, NAN), aux = gelu_in;
  gemm_reference(plan_linear_dinp(N, FC, OC), Epilogue::dgelu, w.data(), dout.data(), dinp.data(),
                 nullptr, aux.data());
  std::vector<double> want(N * FC), dw(OC * FC, 0.0);
  const auto dd = dbl(dout), dwt = dbl(w), dg = dbl(gelu_in);
  const std::vector<double> inp(N * FC, 0.0);
  cpu::matmul_backward<double>(want.data(), dw.data(), nullptr, dd.data(), inp.data(), dwt.data(),
                               N, FC, OC);
  cpu::gelu_backward_inplace<double>(want.data(), dg.data(), want.size());
  expect_near_all(dinp, want);
  EXPECT_EQ(aux, gelu_in);  // read, not written
}

TEST(GemmPlan, AnEpilogueWritesOneProductWithBetaZero) {
  const auto w = normal_values(OC * C, 17), inp = normal_values(N * C, 18),
             bias = normal_values(OC, 19);
  std::vector<float> out(N * OC), aux(N * OC);
  GemmPlan p = plan_linear_forward(N, C, OC);
  p.beta = 1.0f;
  EXPECT_THROW(gemm_reference(p, Epilogue::gelu_aux_bias, w.data(), inp.data(), out.data(),
                              bias.data(), aux.data()),
               std::logic_error);
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
  variants.push_back(key(base, 0, 0, false, Epilogue::gelu_aux_bias));
  variants.push_back(key(base, 0, 0, false, Epilogue::dgelu));
  variants.push_back(key(base, 0, 0, false, Epilogue::none, 4));  // A 4-byte aligned
  for (size_t i = 0; i < variants.size(); ++i)
    for (size_t j = i + 1; j < variants.size(); ++j) {
      EXPECT_FALSE(variants[i] == variants[j]) << i << " vs " << j;
      EXPECT_NE(GemmKeyHash{}(variants[i]), GemmKeyHash{}(variants[j])) << i << " vs " << j;
    }
}

}  // namespace
}  // namespace ringstep::cuda
