// Causal multi-head self-attention on the CPU. Per (batch, head) pair: S = q k^T / sqrt(hs),
// causal mask, row softmax P, out = P v (Vaswani et al. 2017).
//
// Query rows go in blocks of kQueryBlock: block [r0, r0 + nr) only attends to keys
// [0, r0 + nr), so the products skip the masked blocks above the diagonal (for T = 256 and
// blocks of 64 they do 10/16 of the full T x T work; the exact causal half is 8/16).
//
// Every product's B operand is a HeadOperand: in fp32 a PackedB (sgemm.h: prepared once
// for our kernel, k and v once per head, the q and dout blocks once per block); in fp64
// (the tests' reference precision) a strided view of the caller's buffer, multiplied by
// gemm (gemm.h). The fp32 products skip the causal triangle's zeros and unwanted entries
// (sgemm.h's Triangle), which leaves the wanted entries' bits as the full products'.
//
// Pairs run in parallel; each writes only its own head's slices of out, att and dqkv, and
// every product runs on one thread, so the result does not depend on the thread count.
#include "core/cpu/attention_rows.h"
#include "core/cpu/eigen_maps.h"
#include "core/cpu/gemm.h"
#include "core/cpu/ops.h"
#include "core/cpu/sgemm.h"

// GCC 12 reports its own _mm512_undefined_* intrinsics (inlined through Eigen's AVX-512
// packets) as maybe-uninitialized; a known false positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ringstep::cpu {
namespace {

using namespace attention_rows;

// The B operand of a head's products, op(B) (K x N) with B(k, j) = trans ? b[j * ldb + k] :
// b[k * ldb + j]. multiply computes C[M x N] = alpha * op(A) * B[0:K, 0:N] + beta * C
// (row-major), with op(A)(i, k) = trans_a ? a[k * lda + i] : a[i * lda + k]; TRI says what
// it may skip (the fp64 reference computes everything).
template <typename T>
class HeadOperand {
 public:
  void set(bool trans, const T* b, int ldb, int /*K*/, int /*N*/) {
    trans_ = trans;
    b_ = b;
    ldb_ = ldb;
  }
  void multiply(bool trans_a, int M, int N, int K, T alpha, const T* a, int lda, T beta, T* c,
                int ldc, Triangle /*tri*/) const {
    gemm<T>(trans_a, trans_, M, N, K, alpha, a, lda, b_, ldb_, beta, c, ldc);
  }

 private:
  bool trans_ = false;
  const T* b_ = nullptr;
  int ldb_ = 0;
};

// In float, packed once for all the products that read it (sgemm.h).
template <>
class HeadOperand<float> {
 public:
  void set(bool trans, const float* b, int ldb, int K, int N) { packed_.pack(trans, b, ldb, K, N); }
  void multiply(bool trans_a, int M, int N, int K, float alpha, const float* a, int lda, float beta,
                float* c, int ldc, Triangle tri) const {
    gemm_packed(trans_a, M, N, K, alpha, a, lda, packed_, beta, c, ldc, tri);
  }

 private:
  PackedB packed_;
};

// Offsets of the q, k or v slice (part 0, 1, 2) of head h of batch row b inside
// qkv[B, Tt, 3C] (row stride 3C), and of head h's slice of a [B, Tt, C] buffer.
size_t qkv_offset(int part, int b, int h, int Tt, int C, int hs) {
  return size_t(b) * Tt * 3 * C + size_t(part) * C + size_t(h) * hs;
}
size_t head_offset(int b, int h, int Tt, int C, int hs) {
  return size_t(b) * Tt * C + size_t(h) * hs;
}

// Per-thread block of dP/dS, kept between calls; aligned for Eigen's packet loads.
template <typename T>
T* scratch(size_t n) {
  thread_local std::vector<T, Eigen::aligned_allocator<T>> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tt, int C, int NH) {
  const int hs = C / NH, ld = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  const int threads = head_loop_threads(B * NH);
  // Heads go to threads as they free up (cores of a shared VM run at uneven speeds); a
  // head's results do not depend on the thread.
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const T* q = qkv + qkv_offset(0, b, h, Tt, C, hs);
    thread_local HeadOperand<T> kt, v;  // k^T (hs x Tt) and v (Tt x hs)
    kt.set(true, qkv + qkv_offset(1, b, h, Tt, C, hs), ld, hs, Tt);
    v.set(false, qkv + qkv_offset(2, b, h, Tt, C, hs), ld, Tt, hs);
    T* o = out + head_offset(b, h, Tt, C, hs);
    T* p = att + size_t(bh) * Tt * Tt;
    for (int r0 = 0; r0 < Tt; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, Tt - r0), nk = r0 + nr;
      T* pb = p + size_t(r0) * Tt;
      // Row i of the block is query r0 + i: it sees keys up to r0 + i.
      kt.multiply(false, nr, nk, hs, scale, q + size_t(r0) * ld, ld, T(0), pb, Tt,
                  {Triangle::c_lower, r0});
      for (int i = 0; i < nr; ++i) causal_softmax_row(pb + size_t(i) * Tt, r0 + i, Tt);
      v.multiply(false, nr, hs, nk, T(1), pb, Tt, T(0), o + size_t(r0) * C, C,
                 {Triangle::a_lower, r0});
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tt, int C,
                        int NH) {
  const int hs = C / NH, ld = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(dynamic) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const T* q = qkv + qkv_offset(0, b, h, Tt, C, hs);
    const T* k = qkv + qkv_offset(1, b, h, Tt, C, hs);
    const T* v = qkv + qkv_offset(2, b, h, Tt, C, hs);
    T* dq = dqkv + qkv_offset(0, b, h, Tt, C, hs);
    T* dk = dqkv + qkv_offset(1, b, h, Tt, C, hs);
    T* dv = dqkv + qkv_offset(2, b, h, Tt, C, hs);
    const T* dout_h = dout + head_offset(b, h, Tt, C, hs);
    const T* p = att + size_t(bh) * Tt * Tt;
    // Shared by every block: v^T (hs x Tt) and k (Tt x hs); per block: its q and dout rows.
    thread_local HeadOperand<T> vt, kk, qb, dob;
    vt.set(true, v, ld, hs, Tt);
    kk.set(false, k, ld, Tt, hs);
    T* ds = scratch<T>(size_t(kQueryBlock) * Tt);
    for (int r0 = 0; r0 < Tt; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, Tt - r0), nk = r0 + nr;
      const T* pb = p + size_t(r0) * Tt;
      const T* dout_b = dout_h + size_t(r0) * C;
      vt.multiply(false, nr, nk, hs, T(1), dout_b, C, T(0), ds, nk,  // dP = dout v^T
                  {Triangle::c_lower, r0});
      // Softmax backward: dS = P * (dP - rowsum(dP * P)); masked entries get exact zeros.
      for (int i = 0; i < nr; ++i) {
        causal_softmax_backward_row(ds + size_t(i) * nk, pb + size_t(i) * Tt, r0 + i, nk);
      }
      kk.multiply(false, nr, hs, nk, scale, ds, nk, T(1), dq + size_t(r0) * ld, ld,
                  {Triangle::a_lower, r0});
      // Key j gets dS and P entries from queries r0 + i >= j only: (dS^T)(j, i) is 0 for
      // i < j - r0.
      qb.set(false, q + size_t(r0) * ld, ld, nr, hs);
      qb.multiply(true, nk, hs, nr, scale, ds, nk, T(1), dk, ld,  // dk += scale dS^T q
                  {Triangle::a_upper, r0});
      dob.set(false, dout_b, C, nr, hs);
      dob.multiply(true, nk, hs, nr, T(1), pb, Tt, T(1), dv, ld,  // dv += P^T dout
                   {Triangle::a_upper, r0});
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int,
                                        int, int);
template void attention_backward<double>(double*, const double*, const double*, const double*, int,
                                         int, int, int);

}  // namespace ringstep::cpu
