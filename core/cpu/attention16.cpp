// Causal multi-head self-attention with 16-bit storage (core/cpu/attention16.h). The
// structure is ops_attention.cpp's: per (batch, head) pair, query rows in blocks of
// kQueryBlock, block [r0, r0 + nr) attending to keys [0, r0 + nr) only, so the products skip
// the masked blocks above the diagonal. The difference is where values live: q, k, v, P and
// dO, dS enter the products as 16-bit (gemm16 reads the head slices of qkv in place, row
// stride 3C), products accumulate in fp32, and the softmax and its backward run in fp32 on
// one block of rows held in per-thread scratch.
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

// 64-byte aligned allocator: one cache line, one AVX-512 packet, the AMX kernel's loads.
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

}  // namespace

void attention_forward16(DType dt, uint16_t* out, uint16_t* att, const uint16_t* qkv, int B, int T,
                         int C, int NH) {
  check_args("attention_forward16", dt, C, NH);
  const int hs = C / NH, ld3 = 3 * C;
  const float scale = 1.0f / std::sqrt(float(hs));
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const uint16_t* q = qkv + head_offset(b, h, T, C, hs);
    const uint16_t* k = q + C;
    const uint16_t* v = q + 2 * C;
    uint16_t* o = out + size_t(b) * T * C + size_t(h) * hs;
    uint16_t* p = att + size_t(bh) * T * T;
    float* s = scratch<float, 0>(size_t(kQueryBlock) * T);  // nr x nk, leading dim nk
    float* o32 = scratch<float, 1>(size_t(kQueryBlock) * hs);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
      gemm16(dt, false, true, nr, nk, hs, scale, q + size_t(r0) * ld3, ld3, k, ld3, 0.0f, s, nk);
      for (int i = 0; i < nr; ++i) {
        float* row = s + size_t(i) * nk;
        uint16_t* prow = p + size_t(r0 + i) * T;
        causal_softmax_row(row, r0 + i, nk);
        narrow_from_fp32(dt, row, prow, size_t(nk));
        std::fill(prow + nk, prow + T, uint16_t(0));  // +0 in both bf16 and fp16
      }
      gemm16(dt, false, false, nr, hs, nk, 1.0f, p + size_t(r0) * T, T, v, ld3, 0.0f, o32, hs);
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
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const size_t off = head_offset(b, h, T, C, hs);
    const uint16_t* q = qkv + off;
    const uint16_t* k = q + C;
    const uint16_t* v = q + 2 * C;
    float* dq = dqkv + off;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* dout_h = dout + size_t(b) * T * C + size_t(h) * hs;
    const uint16_t* p = att + size_t(bh) * T * T;
    float* ds = scratch<float, 0>(size_t(kQueryBlock) * T);  // dP, then dS; leading dim nk
    float* prow = scratch<float, 1>(size_t(T));              // one row of P, widened
    uint16_t* do16 = scratch<uint16_t, 0>(size_t(kQueryBlock) * hs);
    uint16_t* ds16 = scratch<uint16_t, 1>(size_t(kQueryBlock) * T);
    for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, T - r0), nk = r0 + nr;
      const uint16_t* pb = p + size_t(r0) * T;
      for (int i = 0; i < nr; ++i) {
        narrow_from_fp32(dt, dout_h + size_t(r0 + i) * C, do16 + size_t(i) * hs, size_t(hs));
      }
      gemm16(dt, false, true, nr, nk, hs, 1.0f, do16, hs, v, ld3, 0.0f, ds, nk);  // dP
      for (int i = 0; i < nr; ++i) {
        const int t = r0 + i;
        widen_to_fp32(dt, p + size_t(t) * T, prow, size_t(padded_length(t + 1, nk)));
        causal_softmax_backward_row(ds + size_t(i) * nk, prow, t, nk);
        narrow_from_fp32(dt, ds + size_t(i) * nk, ds16 + size_t(i) * nk, size_t(nk));
      }
      // dq += scale dS k; dk += scale dS^T q; dv += P^T dO (all in fp32 accumulators).
      gemm16(dt, false, false, nr, hs, nk, scale, ds16, nk, k, ld3, 1.0f, dq + size_t(r0) * ld3,
             ld3);
      gemm16(dt, true, false, nk, hs, nr, scale, ds16, nk, q + size_t(r0) * ld3, ld3, 1.0f, dk,
             ld3);
      gemm16(dt, true, false, nk, hs, nr, 1.0f, pb, T, do16, hs, 1.0f, dv, ld3);
    }
  }
}

}  // namespace ringstep::cpu
