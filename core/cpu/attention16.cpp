// Causal multi-head self-attention with 16-bit storage (core/cpu/attention16.h). The
// structure is ops_attention.cpp's: per (batch, head) pair, query rows in blocks of
// kQueryBlock, block [r0, r0 + nr) attending to keys [0, r0 + nr) only, so the products skip
// the masked blocks above the diagonal. The difference is where values live: q, k, v, P and
// dO, dS enter the products as 16-bit values, products accumulate in fp32, and the softmax
// and its backward run in fp32 on one block of rows held in per-thread scratch.
//
// Two ways to run the products:
// - with a bf16 kernel (AMX, AVX512-BF16), gemm16 on the 16-bit values, reading the head
//   slices of qkv in place (row stride 3C);
// - where gemm16 widens (fp16; bf16 without such a kernel), the fp32 attention's products
//   (ops_attention.cpp) on the 16-bit values widened: each head's q, k, v widened once,
//   every operand packed once per head or block (sgemm.h's PackedB), the causal triangles
//   skipped. These are the chains gemm16 would run (sgemm on the widened values), so the
//   bits are the same as calling it.
//
// Rounding points mirror a GPU's mixed-precision attention: P is rounded once and that
// rounded P is both the stored activation and the operand of P v, so forward and backward
// see the same P; dO and dS are rounded where they enter a product.
#include "core/cpu/attention16.h"

// GCC 12 reports its own _mm512_undefined_* intrinsics (inlined through Eigen's AVX-512
// packets) as maybe-uninitialized; a known false positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cpu/attention_rows.h"
#include "core/cpu/eigen_maps.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ringstep::cpu {
namespace {

using namespace attention_rows;

constexpr std::align_val_t kScratchAlign{64};

// 64-byte aligned allocator: one cache line, one AVX-512 packet, the bf16 kernels' loads.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  explicit Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kScratchAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kScratchAlign); }
  bool operator==(const Aligned64&) const = default;
};

// Per-thread scratch buffer SLOT of element type T, kept between calls and grown on demand.
template <typename T, int Slot>
T* scratch(size_t n) {
  thread_local std::vector<T, Aligned64<T>> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

void check_args(const char* fn, DType dt, int C, int NH) {
  if (dt != DType::bf16 && dt != DType::f16) {
    throw std::invalid_argument(std::string(fn) + ": dtype must be bf16 or fp16, got " +
                                dtype_name(dt));
  }
  if (NH <= 0 || C % NH != 0) {
    throw std::invalid_argument(std::string(fn) + ": NH = " + std::to_string(NH) +
                                " does not divide C = " + std::to_string(C));
  }
}

// Head h of batch row b: its q slice inside qkv[B, T, 3C] (k is + C, v is + 2C), row
// stride 3C; the same offsets index dqkv.
size_t head_offset(int b, int h, int T, int C, int hs) {
  return size_t(b) * T * 3 * C + size_t(h) * hs;
}

// One head's q, k and v (T x hs each, row stride 3C inside qkv): as gemm16 operands, or,
// where gemm16 widens, widened once here into dense per-thread scratch.
class HeadOperands {
 public:
  enum Part { q = 0, k = 1, v = 2 };

  HeadOperands(DType dt, const uint16_t* q_bits, int T, int C, int hs)
      : bits_(q_bits), T_(T), C_(C), hs_(hs) {
    if (!gemm16_widens(dt)) return;
    float* wide = scratch<float, 2>(size_t(3) * T * hs);
    for (int part = q; part <= v; ++part)
      for (int t = 0; t < T; ++t)
        widen_to_fp32(dt, row_bits(Part(part), t), wide + (size_t(part) * T + t) * hs, size_t(hs));
    wide_ = wide;
  }

  // PART's widened rows from R0 on (dense, leading dim hs), where gemm16 widens.
  const float* wide(Part part, int r0) const { return wide_ + (size_t(part) * T_ + r0) * hs_; }

  // PART's 16-bit rows from R0 on.
  Operand16 rows(Part part, int r0) const { return {row_bits(part, r0), 3 * C_}; }

 private:
  const uint16_t* row_bits(Part part, int t) const {
    return bits_ + size_t(t) * 3 * C_ + size_t(part) * C_;
  }

  const uint16_t* bits_;
  const float* wide_ = nullptr;
  int T_, C_, hs_;
};

// ROWS x COLS fp32 values at SRC (leading dim LD) narrowed to DT into BITS where they
// enter products, as a dense operand (leading dim COLS).
Operand16 narrowed_rows(DType dt, const float* src, int ld, int rows, int cols, uint16_t* bits) {
  for (int i = 0; i < rows; ++i)
    narrow_from_fp32(dt, src + size_t(i) * ld, bits + size_t(i) * cols, size_t(cols));
  return {bits, cols};
}

// Forward of one head where gemm16 widens: scores and P v on fp32 values, P rounded to DT
// once (stored in P16, its rows T apart, and as the fp32 operand of P v).
void forward_head_widened(DType dt, const HeadOperands& head, int T, int C, int hs, float scale,
                          uint16_t* p16, uint16_t* o) {
  thread_local PackedB kt, v;  // k^T (hs x T) and v (T x hs)
  kt.pack(true, head.wide(HeadOperands::k, 0), hs, hs, T);
  v.pack(false, head.wide(HeadOperands::v, 0), hs, T, hs);
  float* s = scratch<float, 0>(size_t(kQueryBlock) * T);  // nr x nk, leading dim nk
  float* o32 = scratch<float, 1>(size_t(kQueryBlock) * hs);
  for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
    const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
    gemm_packed(false, nr, nk, hs, scale, head.wide(HeadOperands::q, r0), hs, kt, 0.0f, s, nk,
                {Triangle::c_lower, r0});
    for (int i = 0; i < nr; ++i) {
      float* row = s + size_t(i) * nk;
      uint16_t* prow = p16 + size_t(r0 + i) * T;
      causal_softmax_row(row, r0 + i, nk);
      narrow_from_fp32(dt, row, prow, size_t(nk));
      widen_to_fp32(dt, prow, row, size_t(nk));  // the rounded P, as P v reads it
      std::fill(prow + nk, prow + T, uint16_t(0));
    }
    gemm_packed(false, nr, hs, nk, 1.0f, s, nk, v, 0.0f, o32, hs, {Triangle::a_lower, r0});
    for (int i = 0; i < nr; ++i)
      narrow_from_fp32(dt, o32 + size_t(i) * hs, o + size_t(r0 + i) * C, size_t(hs));
  }
}

// Backward of one head where gemm16 widens: dO and dS rounded to DT in fp32, P widened.
void backward_head_widened(DType dt, const HeadOperands& head, int T, int C, int hs, float scale,
                           const float* dout_h, const uint16_t* p16, float* dq, float* dk,
                           float* dv) {
  const int ld3 = 3 * C;
  thread_local PackedB vt, kk, qb, dob;  // v^T and k for every block; q and dO per block
  vt.pack(true, head.wide(HeadOperands::v, 0), hs, hs, T);
  kk.pack(false, head.wide(HeadOperands::k, 0), hs, T, hs);
  float* ds = scratch<float, 0>(size_t(kQueryBlock) * T);  // dP, then dS; leading dim nk
  float* do32 = scratch<float, 1>(size_t(kQueryBlock) * hs);
  float* p32 = scratch<float, 3>(size_t(kQueryBlock) * T);  // the block's P rows, widened
  for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
    const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
    for (int i = 0; i < nr; ++i)
      round_to_dtype(dt, dout_h + size_t(r0 + i) * C, do32 + size_t(i) * hs, size_t(hs));
    gemm_packed(false, nr, nk, hs, 1.0f, do32, hs, vt, 0.0f, ds, nk,  // dP = dO v^T
                {Triangle::c_lower, r0});
    for (int i = 0; i < nr; ++i) {
      float* prow = p32 + size_t(i) * nk;
      widen_to_fp32(dt, p16 + size_t(r0 + i) * T, prow, size_t(nk));
      causal_softmax_backward_row(ds + size_t(i) * nk, prow, r0 + i, nk);
      round_to_dtype(dt, ds + size_t(i) * nk, ds + size_t(i) * nk, size_t(nk));
    }
    gemm_packed(false, nr, hs, nk, scale, ds, nk, kk, 1.0f, dq + size_t(r0) * ld3, ld3,
                {Triangle::a_lower, r0});  // dq += scale dS k
    qb.pack(false, head.wide(HeadOperands::q, r0), hs, nr, hs);
    gemm_packed(true, nk, hs, nr, scale, ds, nk, qb, 1.0f, dk, ld3,  // dk += scale dS^T q
                {Triangle::a_upper, r0});
    dob.pack(false, do32, hs, nr, hs);
    gemm_packed(true, nk, hs, nr, 1.0f, p32, nk, dob, 1.0f, dv, ld3,  // dv += P^T dO
                {Triangle::a_upper, r0});
  }
}

}  // namespace

void attention_forward16(DType dt, uint16_t* out, uint16_t* att, const uint16_t* qkv, int B, int T,
                         int C, int NH) {
  check_args("attention_forward16", dt, C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  const bool widens = gemm16_widens(dt);
  const int threads = head_loop_threads(B * NH);
  // Heads go to threads as they free up (cores of a shared VM run at uneven speeds); a
  // head's results do not depend on the thread.
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const HeadOperands head(dt, qkv + head_offset(b, h, T, C, hs), T, C, hs);
    uint16_t* o = out + size_t(b) * T * C + size_t(h) * hs;
    uint16_t* p = att + size_t(bh) * T * T;
    if (widens) {
      forward_head_widened(dt, head, T, C, hs, scale, p, o);
      continue;
    }
    float* s = scratch<float, 0>(size_t(kQueryBlock) * T);  // nr x nk, leading dim nk
    float* o32 = scratch<float, 1>(size_t(kQueryBlock) * hs);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
      gemm16(dt, false, true, nr, nk, hs, scale, head.rows(HeadOperands::q, r0),
             head.rows(HeadOperands::k, 0), 0.0f, s, nk);
      for (int i = 0; i < nr; ++i) {
        float* row = s + size_t(i) * nk;
        uint16_t* prow = p + size_t(r0 + i) * T;
        causal_softmax_row(row, r0 + i, nk);
        narrow_from_fp32(dt, row, prow, size_t(nk));
        std::fill(prow + nk, prow + T, uint16_t(0));  // +0 in both bf16 and fp16
      }
      gemm16(dt, false, false, nr, hs, nk, 1.0f, Operand16{p + size_t(r0) * T, T},
             head.rows(HeadOperands::v, 0), 0.0f, o32, hs);
      for (int i = 0; i < nr; ++i) {
        narrow_from_fp32(dt, o32 + size_t(i) * hs, o + size_t(r0 + i) * C, size_t(hs));
      }
    }
  }
}

void attention_backward16(DType dt, float* dqkv, const float* dout, const uint16_t* qkv,
                          const uint16_t* att, int B, int T, int C, int NH) {
  check_args("attention_backward16", dt, C, NH);
  const int hs = C / NH, ld3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const bool widens = gemm16_widens(dt);
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const size_t off = head_offset(b, h, T, C, hs);
    const HeadOperands head(dt, qkv + off, T, C, hs);
    float* dq = dqkv + off;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* dout_h = dout + size_t(b) * T * C + size_t(h) * hs;
    const uint16_t* p = att + size_t(bh) * T * T;
    if (widens) {
      backward_head_widened(dt, head, T, C, hs, scale, dout_h, p, dq, dk, dv);
      continue;
    }
    float* ds = scratch<float, 0>(size_t(kQueryBlock) * T);   // dP, then dS; leading dim nk
    float* p32 = scratch<float, 3>(size_t(kQueryBlock) * T);  // the block's P rows, widened
    uint16_t* do16 = scratch<uint16_t, 0>(size_t(kQueryBlock) * hs);
    uint16_t* ds16 = scratch<uint16_t, 1>(size_t(kQueryBlock) * T);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
      const Operand16 dO = narrowed_rows(dt, dout_h + size_t(r0) * C, C, nr, hs, do16);
      gemm16(dt, false, true, nr, nk, hs, 1.0f, dO, head.rows(HeadOperands::v, 0), 0.0f, ds,
             nk);  // dP
      for (int i = 0; i < nr; ++i) {
        const int t = r0 + i;
        float* prow = p32 + size_t(i) * nk;
        widen_to_fp32(dt, p + size_t(t) * T, prow, size_t(padded_length(t + 1, nk)));
        causal_softmax_backward_row(ds + size_t(i) * nk, prow, t, nk);
      }
      const Operand16 dS = narrowed_rows(dt, ds, nk, nr, nk, ds16);
      const Operand16 P{p + size_t(r0) * T, T};
      // dq += scale dS k; dk += scale dS^T q; dv += P^T dO (all in fp32 accumulators).
      gemm16(dt, false, false, nr, hs, nk, scale, dS, head.rows(HeadOperands::k, 0), 1.0f,
             dq + size_t(r0) * ld3, ld3);
      gemm16(dt, true, false, nk, hs, nr, scale, dS, head.rows(HeadOperands::q, r0), 1.0f, dk, ld3);
      gemm16(dt, true, false, nk, hs, nr, 1.0f, P, dO, 1.0f, dv, ld3);
    }
  }
}

}  // namespace ringstep::cpu
