// Causal multi-head self-attention with 16-bit storage (core/cpu/attention16.h). The
// structure is ops_attention.cpp's: per (batch, head) pair, query rows in blocks of
// kQueryBlock, block [r0, r0 + nr) attending to keys [0, r0 + nr) only, so the products skip
// the masked blocks above the diagonal. The difference is where values live: q, k, v, P and
// dO, dS enter the products as 16-bit (gemm16 reads the head slices of qkv in place, row
// stride 3C; where it widens, each head's q, k, v are widened once and dO, dS are rounded
// in fp32, so no product widens an operand again), products accumulate in fp32, and the
// softmax and its backward run in fp32 on one block of rows held in per-thread scratch.
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

// One head's q, k and v (T x hs each, row stride 3C inside qkv) as gemm16 operands. Where
// gemm16 widens (no AMX or AVX512-BF16), the three are widened once here, into dense per-thread
// scratch, instead of once per query block inside every product.
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

  // PART's rows from R0 on.
  Operand16 rows(Part part, int r0) const {
    if (wide_ == nullptr) return {row_bits(part, r0), 3 * C_};
    return {row_bits(part, r0), 3 * C_, wide_ + (size_t(part) * T_ + r0) * hs_, hs_};
  }

 private:
  const uint16_t* row_bits(Part part, int t) const {
    return bits_ + size_t(t) * 3 * C_ + size_t(part) * C_;
  }

  const uint16_t* bits_;
  const float* wide_ = nullptr;
  int T_, C_, hs_;
};

// ROWS x COLS fp32 values at SRC (leading dim LD) rounded to DT where they enter products,
// as a dense operand (leading dim COLS): kept in fp32 in WIDE where gemm16 widens, else
// narrowed into BITS. WIDE may be SRC itself when LD == COLS.
Operand16 rounded_rows(DType dt, const float* src, int ld, int rows, int cols, float* wide,
                       uint16_t* bits) {
  const bool widens = gemm16_widens(dt);
  for (int i = 0; i < rows; ++i) {
    const float* in = src + size_t(i) * ld;
    if (widens)
      round_to_dtype(dt, in, wide + size_t(i) * cols, size_t(cols));
    else
      narrow_from_fp32(dt, in, bits + size_t(i) * cols, size_t(cols));
  }
  if (widens) return {nullptr, 0, wide, cols};
  return {bits, cols};
}

}  // namespace

void attention_forward16(DType dt, uint16_t* out, uint16_t* att, const uint16_t* qkv, int B, int T,
                         int C, int NH) {
  check_args("attention_forward16", dt, C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int threads = head_loop_threads(B * NH);
  // Heads go to threads as they free up (cores of a shared VM run at uneven speeds); a
  // head's results do not depend on the thread.
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const HeadOperands head(dt, qkv + head_offset(b, h, T, C, hs), T, C, hs);
    uint16_t* o = out + size_t(b) * T * C + size_t(h) * hs;
    uint16_t* p = att + size_t(bh) * T * T;
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
    float* ds = scratch<float, 0>(size_t(kQueryBlock) * T);  // dP, then dS; leading dim nk
    float* do32 = scratch<float, 1>(size_t(kQueryBlock) * hs);
    float* p32 = scratch<float, 3>(size_t(kQueryBlock) * T);  // the block's P rows, widened
    uint16_t* do16 = scratch<uint16_t, 0>(size_t(kQueryBlock) * hs);
    uint16_t* ds16 = scratch<uint16_t, 1>(size_t(kQueryBlock) * T);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
      const uint16_t* pb = p + size_t(r0) * T;
      const Operand16 dO = rounded_rows(dt, dout_h + size_t(r0) * C, C, nr, hs, do32, do16);
      gemm16(dt, false, true, nr, nk, hs, 1.0f, dO, head.rows(HeadOperands::v, 0), 0.0f, ds,
             nk);  // dP
      for (int i = 0; i < nr; ++i) {
        const int t = r0 + i;
        // Where gemm16 widens, the whole row: P^T dO below reads it too.
        const int len = widens ? nk : padded_length(t + 1, nk);
        float* prow = p32 + size_t(i) * nk;
        widen_to_fp32(dt, p + size_t(t) * T, prow, size_t(len));
        causal_softmax_backward_row(ds + size_t(i) * nk, prow, t, nk);
      }
      const Operand16 dS = rounded_rows(dt, ds, nk, nr, nk, ds, ds16);
      const Operand16 P = widens ? Operand16{pb, T, p32, nk} : Operand16{pb, T};
      // dq += scale dS k; dk += scale dS^T q; dv += P^T dO (all in fp32 accumulators).
      gemm16(dt, false, false, nr, hs, nk, scale, dS, head.rows(HeadOperands::k, 0), 1.0f,
             dq + size_t(r0) * ld3, ld3);
      gemm16(dt, true, false, nk, hs, nr, scale, dS, head.rows(HeadOperands::q, r0), 1.0f, dk, ld3);
      gemm16(dt, true, false, nk, hs, nr, 1.0f, P, dO, 1.0f, dv, ld3);
    }
  }
}

}  // namespace ringstep::cpu
