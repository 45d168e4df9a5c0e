// The fused attention's tiling, checked without a GPU: the host twin of the kernels
// (core/cuda/flash_twin.h: their block loops, online softmax, LSE and recomputation of P,
// through the functions core/cuda/flash_tiling.h shares with them) against the CPU
// attention op (core/cpu/ops.h, in double), forward and backward, on fp32 inputs and on
// bf16- and fp16-rounded ones (then the output is rounded as the kernel stores it), odd T,
// several head sizes, B > 1, NH > 1. Relative error ||twin - cpu|| / ||cpu|| within
// flash_tolerance_vs_cpu (core/cuda/flash_variants.h: 1e-5 fp32, 2u for 16-bit storage,
// 7.8e-3 bf16 and 9.8e-4 fp16); the measured errors are recorded as test properties
// (--gtest_output=xml).
#include "core/cuda/flash_twin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu/attention16.h"
#include "core/cpu/ops.h"
#include "core/cuda/attention_layout.h"
#include "core/cuda/flash_tiling.h"
#include "core/cuda/flash_variants.h"
#include "core/dtype.h"
#include "core/normal_values.h"

namespace ringstep::cuda {
namespace {

using flash::FlashKernel;
using flash::kBlockK;
using flash::kBlockQ;
using flash::num_blocks;

using ringstep::testing::normal_values;

std::vector<float> rounded(DType dt, std::vector<float> v) {
  if (dt != DType::f32) round_to_dtype(dt, v.data(), v.data(), v.size());
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The tiles with at least one visible (query, key) pair, by brute force over every pair.
std::set<std::pair<int, int>> live_tiles(int T) {
  std::set<std::pair<int, int>> live;
  for (int q = 0; q < T; ++q)
    for (int k = 0; k <= q; ++k) live.insert({q / kBlockQ, k / kBlockK});
  return live;
}

TEST(AttentionLayout, MapsCoverEachElementOnceWhereTheCpuOpLooks) {
  const int B = 2, T = 5, NH = 3, hs = 4, C = NH * hs;
  std::vector<int> hit_qkv(size_t(B) * T * 3 * C, 0), hit_out(size_t(B) * T * C, 0),
      hit_row(size_t(B) * NH * T, 0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        ++hit_row.at(row_index(b * NH + h, t, T));
        for (int d = 0; d < hs; ++d) {
          // core/cpu/ops.h: channel h hs + d of token (b, t); q | k | v of width C each.
          const size_t c = size_t(h) * hs + d, bt = size_t(b) * T + t;
          EXPECT_EQ(btc_index(b, t, h, d, T, C, hs), bt * C + c);
          ++hit_out.at(btc_index(b, t, h, d, T, C, hs));
          for (int part = 0; part < 3; ++part) {
            EXPECT_EQ(qkv_index(b, t, part, h, d, T, C, hs), bt * 3 * C + size_t(part) * C + c);
            ++hit_qkv.at(qkv_index(b, t, part, h, d, T, C, hs));
          }
        }
      }
  for (const auto* hits : {&hit_qkv, &hit_out, &hit_row})
    for (int n : *hits) EXPECT_EQ(n, 1);
}

TEST(FlashTiling, ForwardVisitsExactlyTheTilesOnOrBelowTheDiagonal) {
  for (int T : {1, 7, 63, 64, 65, 127, 128, 130, 200, 1024}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<FlashTile> visited;
    std::vector<float> qkv(size_t(T) * 3 * 2, 0.5f), out(size_t(T) * 2), lse(T);
    flash_forward_twin(DType::f32, FlashKernel::simt, out.data(), lse.data(), qkv.data(), 1, T, 2,
                       1, &visited);
    // Each thread block walks its key blocks left to right, once each, and stops at the
    // diagonal: exactly the live tiles, nb (nb + 1) / 2 of the nb^2.
    std::vector<FlashTile> want;
    for (const auto& [qb, kb] : live_tiles(T)) want.push_back({0, qb, kb});
    EXPECT_EQ(visited, want);
    const int nb = num_blocks(T, kBlockQ);
    EXPECT_EQ(int(visited.size()), nb * (nb + 1) / 2);
  }
}

TEST(FlashTiling, BackwardVisitsExactlyTheTilesOnOrBelowTheDiagonal) {
  for (int T : {1, 7, 63, 64, 65, 127, 128, 130, 200, 1024}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::vector<FlashTile> visited;
    std::vector<float> qkv(size_t(T) * 3 * 2, 0.5f), dqkv(qkv.size()), dout(size_t(T) * 2, 1.0f),
        out(size_t(T) * 2, 0.5f), lse(T, 1.0f);
    flash_backward_twin(DType::f32, FlashKernel::simt, dqkv.data(), dout.data(), qkv.data(),
                        out.data(), lse.data(), 1, T, 2, 1, &visited);
    std::vector<FlashTile> want;  // ordered by key block, then query block
    for (int kb = 0; kb < num_blocks(T, kBlockK); ++kb)
      for (const auto& [qb, k] : live_tiles(T))
        if (k == kb) want.push_back({0, qb, kb});
    EXPECT_EQ(visited, want);
  }
}

TEST(FlashTiling, HeadSizesPadToTheRegisterTilesAndFitSharedMemory) {
  EXPECT_EQ(flash::padded_head_size(0), 0);
  EXPECT_EQ(flash::padded_head_size(1), 16);
  EXPECT_EQ(flash::padded_head_size(5), 16);
  EXPECT_EQ(flash::padded_head_size(16), 16);
  EXPECT_EQ(flash::padded_head_size(17), 32);
  EXPECT_EQ(flash::padded_head_size(64), 64);
  EXPECT_EQ(flash::padded_head_size(65), 128);
  EXPECT_EQ(flash::padded_head_size(128), 128);
  EXPECT_EQ(flash::padded_head_size(129), 0);
  // The largest tiles fit an A100's 163 KiB of opt-in shared memory per block (H100/H200:
  // 227 KiB); WMMA's tiles start on 32-byte boundaries.
  constexpr size_t kSm80Bytes = 163 * 1024;
  for (int hp : {16, 32, 64, 128}) {
    SCOPED_TRACE("hp=" + std::to_string(hp));
    EXPECT_LE(flash::simt_forward_smem_bytes(hp), kSm80Bytes);
    EXPECT_LE(flash::simt_backward_smem_bytes(hp), kSm80Bytes);
    EXPECT_LE(flash::tc_forward_smem_bytes(hp), kSm80Bytes);
    EXPECT_LE(flash::tc_backward_smem_bytes(hp), kSm80Bytes);
    EXPECT_EQ(size_t(kBlockQ) * flash::tc_head_stride(hp) * 2 % 32, 0u);
    EXPECT_EQ(size_t(kBlockQ) * flash::tc_acc_stride(hp) * 4 % 32, 0u);
    EXPECT_EQ(16 * flash::tc_head_stride(hp) * 2 % 32, 0);  // a 16-row fragment's start
    EXPECT_EQ(16 * flash::tc_acc_stride(hp) * 4 % 32, 0);
  }
}

TEST(FlashTwin, RejectsHeadSizesBeyondTheKernels) {
  std::vector<float> x(size_t(2) * 3 * 258, 0.0f), lse(2);
  const auto simt = FlashKernel::simt;
  EXPECT_THROW(flash_forward_twin(DType::f32, simt, x.data(), lse.data(), x.data(), 1, 2, 258, 2),
               std::invalid_argument);  // hs 129
  EXPECT_THROW(flash_forward_twin(DType::f32, simt, x.data(), lse.data(), x.data(), 1, 2, 10, 3),
               std::invalid_argument);  // NH does not divide C
  EXPECT_THROW(flash_forward_twin(DType::f32, FlashKernel::tensor_core, x.data(), lse.data(),
                                  x.data(), 1, 2, 4, 2),
               std::invalid_argument);  // tensor cores take bf16 and fp16, not fp32
  EXPECT_THROW(flash_backward_twin(DType::f32, FlashKernel::tensor_core, x.data(), x.data(),
                                   x.data(), x.data(), lse.data(), 1, 2, 4, 2),
               std::invalid_argument);
}

// Where the tensor-core twin rounds, shown exactly on one-wide heads (hs 1, scale 1), for
// each 16-bit storage: forward's P enters P v rounded to the storage dtype, backward's dO
// too. The SIMT twin rounds neither.
TEST(FlashTwin, TensorCoresRoundPAndDoutToTheStorageDtype) {
  for (const DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(name(dt));
    auto store = [dt](float x) { return rounded(dt, {x})[0]; };
    // Query 1 sees key 0 (score 0) and key 1 (score 1, the row max): P = (e^-1, 1). With
    // v = (1, -r), r = e^-1 as DT stores it, out = (r - r) / l = 0 exactly when P is rounded
    // to DT, and (e^-1 - r) / l, not 0, when it is not.
    const float r = store(std::exp(-1.0f));
    const std::vector<float> qkv = {0, 0, 1, 1, 1, -r};  // (q, k, v) of t = 0, then t = 1
    std::vector<float> out(2), lse(2);
    flash_forward_twin(dt, FlashKernel::tensor_core, out.data(), lse.data(), qkv.data(), 1, 2, 1,
                       1);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 0.0f);
    flash_forward_twin(dt, FlashKernel::simt, out.data(), lse.data(), qkv.data(), 1, 2, 1, 1);
    EXPECT_NE(out[1], 0.0f);

    // One token: P = 1, so dv = dO as the products read it; dq = dk = 0 (dS = dO v - dO out
    // with out = v). g lies between bf16's and fp16's neighbours of 1: fp16 keeps 1 + 2^-9,
    // bf16 rounds to 1, fp32 keeps g.
    const float g = 1.0f + 0x1p-9f + 0x1p-13f;
    const std::vector<float> one = {0.5f, 0.25f, 0.75f}, dout = {g};
    std::vector<float> out1(1), lse1(1);
    for (const FlashKernel kernel : {FlashKernel::tensor_core, FlashKernel::simt}) {
      flash_forward_twin(dt, kernel, out1.data(), lse1.data(), one.data(), 1, 1, 1, 1);
      std::vector<float> dqkv(3, 0.0f);
      flash_backward_twin(dt, kernel, dqkv.data(), dout.data(), one.data(), out1.data(),
                          lse1.data(), 1, 1, 1, 1);
      const float want = kernel == FlashKernel::simt ? g : dt == DType::f16 ? 1.0f + 0x1p-9f : 1.0f;
      EXPECT_EQ(dqkv, (std::vector<float>{0.0f, 0.0f, want}));
    }
  }
}

// flash_tiling.h's range contract for fp16: a loss-scaled dO past 65504 rounds to inf where
// it enters the tensor-core products, so the gradient is not finite (the loss scaler's cue
// to skip the step), as with the CPU's fp16 attention, which rounds the same dO; bf16 holds
// it, and the SIMT kernel, which does not round dO, stays finite.
TEST(FlashTwin, Fp16DoutPastItsRangeLeavesTheGradientNonFiniteAsOnTheCpu) {
  const int B = 1, T = 5, C = 8, NH = 2;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
  const std::vector<float> dout(nout, 1e5f);  // a gradient of ~1.5 under a scale of 65536
  auto finite = [](const std::vector<float>& v) {
    for (float x : v)
      if (!std::isfinite(x)) return false;
    return true;
  };
  auto twin_grad = [&](DType dt, FlashKernel kernel) {
    const std::vector<float> qkv = rounded(dt, normal_values(nqkv, 3));
    std::vector<float> out(nout), lse(size_t(B) * NH * T), dqkv(nqkv, 0.0f);
    flash_forward_twin(dt, kernel, out.data(), lse.data(), qkv.data(), B, T, C, NH);
    flash_backward_twin(dt, kernel, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B,
                        T, C, NH);
    return dqkv;
  };
  EXPECT_FALSE(finite(twin_grad(DType::f16, FlashKernel::tensor_core)));
  EXPECT_TRUE(finite(twin_grad(DType::bf16, FlashKernel::tensor_core)));
  EXPECT_TRUE(finite(twin_grad(DType::f16, FlashKernel::simt)));

  const std::vector<float> qkv = normal_values(nqkv, 3);
  std::vector<uint16_t> qkv16(nqkv), out16(nout), att16(size_t(B) * NH * T * T);
  fp32_to_fp16(qkv.data(), qkv16.data(), nqkv);
  cpu::attention_forward16(DType::f16, out16.data(), att16.data(), qkv16.data(), B, T, C, NH);
  std::vector<float> dqkv(nqkv, 0.0f);
  cpu::attention_backward16(DType::f16, dqkv.data(), dout.data(), qkv16.data(), att16.data(), B, T,
                            C, NH);
  EXPECT_FALSE(finite(dqkv));
}

struct Shape {
  int B, T, C, NH;
};

// (storage, kernel): fp32 on the SIMT kernel, bf16 and fp16 on both.
using Variant = testing::FlashVariant;

class FlashTwinVsCpu : public ::testing::TestWithParam<Variant> {
 protected:
  double tol() const { return testing::flash_tolerance_vs_cpu(GetParam().first); }
  // Forward and backward of one shape: twin against cpu::attention_* in double on the same
  // (rounded) inputs. dqkv starts from random values on both sides (the += contract).
  void check(const Shape& s, uint32_t seed) {
    const auto [dt, kernel] = GetParam();
    const auto [B, T, C, NH] = s;
    SCOPED_TRACE(::testing::Message()
                 << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH << " hs=" << C / NH);
    const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
    const std::vector<float> qkv = rounded(dt, normal_values(nqkv, seed));
    const std::vector<float> dout = normal_values(nout, seed + 1),
                             dqkv0 = normal_values(nqkv, seed + 2);

    std::vector<double> qkv_d(qkv.begin(), qkv.end()), out_d(nout), att_d(size_t(B) * NH * T * T);
    cpu::attention_forward<double>(out_d.data(), att_d.data(), qkv_d.data(), B, T, C, NH);
    std::vector<float> out(nout), lse(size_t(B) * NH * T);
    flash_forward_twin(dt, kernel, out.data(), lse.data(), qkv.data(), B, T, C, NH);
    const double e_out = rel_err(out, out_d);
    EXPECT_LE(e_out, tol()) << "out";

    // lse against log sum_k exp(s_k), the scores recomputed in double.
    const int hs = C / NH;
    std::vector<double> lse_d(lse.size());
    for (int bh = 0; bh < B * NH; ++bh)
      for (int q = 0; q < T; ++q) {
        const int b = bh / NH, h = bh % NH;
        double mx = -INFINITY, sum = 0;
        std::vector<double> sc(q + 1);
        for (int k = 0; k <= q; ++k) {
          double dot = 0;
          for (int d = 0; d < hs; ++d)
            dot += qkv_d[(size_t(b) * T + q) * 3 * C + h * hs + d] *
                   qkv_d[(size_t(b) * T + k) * 3 * C + C + h * hs + d];
          sc[k] = dot / std::sqrt(double(hs));
          mx = std::max(mx, sc[k]);
        }
        for (double x : sc) sum += std::exp(x - mx);
        lse_d[size_t(bh) * T + q] = mx + std::log(sum);
      }
    const double e_lse = rel_err(lse, lse_d);
    EXPECT_LE(e_lse, 1e-5) << "lse (fp32 in both modes)";

    std::vector<double> dqkv_d(dqkv0.begin(), dqkv0.end()), dout_d(dout.begin(), dout.end());
    cpu::attention_backward<double>(dqkv_d.data(), dout_d.data(), qkv_d.data(), att_d.data(), B, T,
                                    C, NH);
    std::vector<float> dqkv = dqkv0;
    flash_backward_twin(dt, kernel, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B,
                        T, C, NH);
    const double e_dqkv = rel_err(dqkv, dqkv_d);
    EXPECT_LE(e_dqkv, tol()) << "dqkv";
    // Without the random start the += would hide small gradients: the gradient alone too.
    std::vector<double> grad_d(nqkv);
    std::vector<float> grad(nqkv);
    for (size_t i = 0; i < nqkv; ++i) {
      grad_d[i] = dqkv_d[i] - dqkv0[i];
      grad[i] = dqkv[i] - dqkv0[i];
    }
    const double e_grad = rel_err(grad, grad_d);
    EXPECT_LE(e_grad, tol()) << "dqkv - dqkv0";

    const std::string tag = "T" + std::to_string(T) + "_hs" + std::to_string(hs);
    for (const auto& [what, e] : {std::pair{"out", e_out}, {"lse", e_lse}, {"grad", e_grad}}) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", e);
      RecordProperty(std::string("rel_err_") + what + "_" + tag, text);
    }
  }
};

TEST_P(FlashTwinVsCpu, OddLengthsAndHeadSizes) {
  const Shape shapes[] = {
      {2, 1, 12, 3},     // T = 1, hs 4
      {1, 7, 15, 3},     // hs 5
      {3, 33, 15, 3},    // hs 5, B 3
      {2, 63, 48, 3},    // hs 16, one block short of full
      {1, 64, 64, 2},    // hs 32, exactly one block
      {2, 65, 128, 2},   // hs 64, one row into the second block
      {1, 130, 128, 1},  // hs 128, three blocks
      {2, 130, 96, 3},   // hs 32
      {1, 200, 192, 3},  // hs 64, four blocks
  };
  uint32_t seed = 1;
  for (const Shape& s : shapes) check(s, seed += 3);
}

INSTANTIATE_TEST_SUITE_P(Variants, FlashTwinVsCpu, testing::flash_variants(),
                         testing::flash_variant_name);

}  // namespace
}  // namespace ringstep::cuda
