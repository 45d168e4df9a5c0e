// 16-bit activations and recomputation, checked on the whole model:
// - every recompute policy gives gradients and losses bit-identical to `none`, in fp32,
//   bf16 and fp16 (recomputation runs the same ops on the same stored inputs);
// - 16-bit training computes the same gradients as fp32 up to 16-bit rounding (a wiring
//   mistake in the 16-bit path is off by O(1), rounding by ~1%);
// - the arena's peak shows the memory each choice saves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/cpu/sgemm_probe.h"
#include "core/error.h"
#include "core/threads.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

ModelConfig Model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.seq_len = 32;
  m.d_model = 64;
  m.n_layers = 3;
  m.n_heads = 4;
  return m;
}


struct Result {
  std::vector<float> grads;
  std::vector<float> losses;
  size_t peak = 0;
  double recompute_ms = 0;
};

// Two micro-batches accumulated, the second reporting layers; a trained-looking model
// (LayerNorm parameters perturbed) so that every gradient is generic.
Result RunModel(DType dt, RecomputePolicy policy, int k = 2, int B = 2, int T = 32) {
  const ModelConfig mc = Model();
  Gpt m(mc, GptOptions{dt, policy, k});
  m.init(5);
  std::mt19937 gen(9);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (const auto& t : m.registry().tensors())
    if (t.shape.size() == 1)
      for (size_t i = 0; i < t.numel; ++i) m.params().at(t)[i] += nd(gen);
  Arena arena(m.count_arena_bytes(B, T));
  m.grads().zero();
  Result r;
  for (int micro = 0; micro < 2; ++micro) {
    const Batch b = MakeBatch(B, T, mc.vocab_size, 100 + micro);
    r.losses.push_back(m.forward(b.in.data(), b.tg.data(), B, T, arena));
    std::vector<int> done;
    m.backward(0.5f, arena, [&](int unit) { done.push_back(unit); });
    std::vector<int> every_unit(size_t(m.spec().embedding_unit() + 1));
    std::iota(every_unit.begin(), every_unit.end(), 0);
    EXPECT_EQ(done, every_unit) << "each unit reported once, in backward order";
    r.recompute_ms += m.last_recompute_ms();
  }
  EXPECT_EQ(arena.used_bytes(), 0u) << "backward releases everything forward took";
  r.grads.assign(m.grads().data(), m.grads().data() + m.grads().size());
  r.peak = arena.peak_bytes();
  return r;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  DType dt;
  RecomputePolicy policy;
  int k;
};

Case MakeCase(DType dt, RecomputePolicy policy, int k) { return Case{dt, policy, k}; }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.dt)) + "_" + name(info.param.policy) + "_k" +
         std::to_string(info.param.k);
}

class RecomputeBitIdentical : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeBitIdentical, SameGradientsAndLossesAsNone) {
  const Case c = GetParam();
  const Result none = RunModel(c.dt, RecomputePolicy::none);
  const Result rec = RunModel(c.dt, c.policy, c.k);
  EXPECT_TRUE(BitEqual(none.losses, rec.losses));
  ASSERT_EQ(none.grads.size(), rec.grads.size());
  size_t differ = 0;
  for (size_t i = 0; i < none.grads.size(); ++i)
    differ += std::memcmp(&none.grads[i], &rec.grads[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "gradients differ from policy none in " << differ << " of "
                        << none.grads.size() << " elements";
  EXPECT_LT(rec.peak, none.peak) << "recomputation must keep fewer bytes";
  EXPECT_EQ(none.recompute_ms, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, RecomputeBitIdentical,
    ::testing::Values(MakeCase(DType::f32, RecomputePolicy::full, 1),
                      MakeCase(DType::f32, RecomputePolicy::every_k, 2),
                      MakeCase(DType::f32, RecomputePolicy::every_k, 3),
                      MakeCase(DType::f32, RecomputePolicy::selective, 1),
                      MakeCase(DType::bf16, RecomputePolicy::full, 1),
                      MakeCase(DType::bf16, RecomputePolicy::every_k, 2),
                      MakeCase(DType::bf16, RecomputePolicy::selective, 1),
                      MakeCase(DType::f16, RecomputePolicy::full, 1),
                      MakeCase(DType::f16, RecomputePolicy::selective, 1)),
    CaseName);

// The thread count changes nothing: a step on 1, 2 or 3 threads (OpenMP loops and the
// OpenBLAS sharing their pool, attention's per-head loop, the AMX GEMMs) gives the same
// losses and gradients bit for bit. 16 x 32 rows of width 64 pass every op's parallel
// threshold, so each parallel path runs split. Where the BLAS itself is not thread-count
// invariant (test::SgemmThreadInvariant) only that rounding may differ: within 1e-5
// relative in fp32, 1e-3 where a 16-bit rounding of an activation may flip with it.
class ThreadCountBitIdentical : public ::testing::TestWithParam<DType> {};

TEST_P(ThreadCountBitIdentical, SameGradientsAndLossesOnOneTwoAndThreeThreads) {
  const int saved = hardware_threads();
  const bool blas_invariant = test::SgemmThreadInvariant();
  const double tol = GetParam() == DType::f32 ? 1e-5 : 1e-3;
  if (!blas_invariant)
    std::cout << "  [note] this machine's sgemm rounds differently on 1 and 2 threads: "
                 "comparing within " << tol << " instead of bit for bit\n";
  set_compute_threads(1);
  const Result one = RunModel(GetParam(), RecomputePolicy::none, 1, 16, 32);
  for (int threads : {2, 3}) {
    set_compute_threads(threads);
    const Result many = RunModel(GetParam(), RecomputePolicy::none, 1, 16, 32);
    if (blas_invariant) {
      EXPECT_TRUE(BitEqual(one.losses, many.losses)) << threads << " threads";
      EXPECT_TRUE(BitEqual(one.grads, many.grads)) << threads << " threads";
    } else {
      EXPECT_LE(test::MaxRelDiff(many.losses, one.losses), tol) << threads << " threads";
      EXPECT_LE(test::MaxRelDiff(many.grads, one.grads), tol) << threads << " threads";
      std::cout << "  [note] " << threads << " threads: losses differ by "
                << test::MaxRelDiff(many.losses, one.losses) << ", gradients by "
                << test::MaxRelDiff(many.grads, one.grads) << " (max relative)\n";
    }
  }
  set_compute_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ThreadCountBitIdentical,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Gradients of the 16-bit model against fp32's: the relative error of the whole gradient
// vector (||g16 - g32|| / ||g32||) is what rounding every activation to 8 (bf16) or 11
// (fp16) significant bits costs; a wrong operand or a missed conversion gives O(1).
double RelativeError(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(GptPrecision, SixteenBitGradientsFollowFp32) {
  const Result f32 = RunModel(DType::f32, RecomputePolicy::none);
  const Result bf16 = RunModel(DType::bf16, RecomputePolicy::none);
  const Result f16 = RunModel(DType::f16, RecomputePolicy::none);
  const double e_bf16 = RelativeError(bf16.grads, f32.grads);
  const double e_f16 = RelativeError(f16.grads, f32.grads);
  // bf16 keeps 8 bits (relative rounding 2^-9 = 0.2%), fp16 11 bits (0.02%); errors
  // compound through 3 blocks and the softmax.
  EXPECT_LT(e_bf16, 0.05);
  EXPECT_LT(e_f16, 0.01);
  EXPECT_LT(e_f16, e_bf16) << "fp16 carries 3 more mantissa bits than bf16";
  EXPECT_GT(e_bf16, 0.0) << "bf16 must actually round the activations";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(bf16.losses[i], f32.losses[i], 0.02 * f32.losses[i]);
    EXPECT_NEAR(f16.losses[i], f32.losses[i], 0.005 * f32.losses[i]);
  }
}

TEST(GptPrecision, SixteenBitActivationsHalveTheBlocksBytes) {
  // Longer sequences so the blocks' activations dominate the arena (fp32 logits,
  // probabilities and backward's fp32 buffers do not shrink).
  const Result f32 = RunModel(DType::f32, RecomputePolicy::none, 2, 4, 32);
  const Result bf16 = RunModel(DType::bf16, RecomputePolicy::none, 2, 4, 32);
  const Result f16 = RunModel(DType::f16, RecomputePolicy::none, 2, 4, 32);
  EXPECT_EQ(bf16.peak, f16.peak);
  EXPECT_LT(double(bf16.peak), 0.75 * double(f32.peak));
}

TEST(GptPrecision, RecomputeFlopsFollowThePolicy) {
  const ModelConfig mc = Model();
  const double C = mc.d_model, T = mc.seq_len;
  const double block = 16 * C * C + 2 * C * T;  // one block's forward up to the MLP output GEMM
  EXPECT_EQ(Gpt(mc).recompute_flops_per_token(), 0.0);
  EXPECT_DOUBLE_EQ(Gpt(mc, {DType::f32, RecomputePolicy::full, 1}).recompute_flops_per_token(),
                   3 * block);
  // every_k with k = 2 recomputes blocks 0 and 2 of 3.
  EXPECT_DOUBLE_EQ(Gpt(mc, {DType::f32, RecomputePolicy::every_k, 2}).recompute_flops_per_token(),
                   2 * block);
  EXPECT_DOUBLE_EQ(
      Gpt(mc, {DType::f32, RecomputePolicy::selective, 1}).recompute_flops_per_token(),
      3 * 2 * C * T);
}

TEST(GptPrecision, BadRecomputeSettingsAreInputErrors) {
  EXPECT_THROW(Gpt(Model(), {DType::f32, RecomputePolicy::every_k, 0}), InputError);
}

}  // namespace
}  // namespace ringstep
