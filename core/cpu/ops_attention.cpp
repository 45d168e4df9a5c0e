// Causal multi-head self-attention on the CPU. Per (batch, head) pair: S = q k^T / sqrt(hs),
// causal mask, row softmax P, out = P v (Vaswani et al. 2017). Each product is one GEMM on
// strided Eigen maps of the caller's buffers (a head's q, k, v are hs-wide column slices of
// qkv with row stride 3C), so with EIGEN_USE_BLAS they go to sgemm/dgemm without copies.
//
// Query rows go in blocks of kQueryBlock: block [r0, r0 + nr) only attends to keys
// [0, r0 + nr), so the GEMMs skip the masked blocks above the diagonal (for T = 256 and
// blocks of 64 they do 10/16 of the full T x T work; the exact causal half is 8/16).
//
// Pairs run in parallel; each writes only its own head's slices of out, att and dqkv, so
// the result does not depend on the thread count. Inside that parallel loop OpenBLAS (its
// OpenMP build) runs each GEMM on the calling thread.
#include "core/cpu/ops.h"
#include "core/cpu/attention_rows.h"
#include "core/cpu/eigen_maps.h"

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


// The q, k or v slice (part 0, 1, 2) of head h of batch row b inside qkv[B, Tt, 3C].
template <typename T>
ConstStridedMap<T> head_slice(const T* qkv, int part, int b, int h, int Tt, int C, int hs) {
  const T* p = qkv + size_t(b) * Tt * 3 * C + size_t(part) * C + size_t(h) * hs;
  return ConstStridedMap<T>(p, Tt, hs, Eigen::OuterStride<>(3 * C));
}
template <typename T>
StridedMap<T> head_slice(T* qkv, int part, int b, int h, int Tt, int C, int hs) {
  T* p = qkv + size_t(b) * Tt * 3 * C + size_t(part) * C + size_t(h) * hs;
  return StridedMap<T>(p, Tt, hs, Eigen::OuterStride<>(3 * C));
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
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const auto q = head_slice(qkv, 0, b, h, Tt, C, hs);
    const auto k = head_slice(qkv, 1, b, h, Tt, C, hs);
    const auto v = head_slice(qkv, 2, b, h, Tt, C, hs);
    StridedMap<T> o(out + size_t(b) * Tt * C + size_t(h) * hs, Tt, hs, Eigen::OuterStride<>(C));
    MatrixMap<T> p(att + size_t(bh) * Tt * Tt, Tt, Tt);
    for (int r0 = 0; r0 < Tt; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, Tt - r0), nk = r0 + nr;
      auto pb = p.block(r0, 0, nr, nk);
      pb.noalias() = scale * q.middleRows(r0, nr) * k.topRows(nk).transpose();
      for (int i = 0; i < nr; ++i) causal_softmax_row(&p(r0 + i, 0), r0 + i, Tt);
      o.middleRows(r0, nr).noalias() = pb * v.topRows(nk);
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int B, int Tt, int C,
                        int NH) {
  const int hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  const int threads = head_loop_threads(B * NH);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const auto q = head_slice(qkv, 0, b, h, Tt, C, hs);
    const auto k = head_slice(qkv, 1, b, h, Tt, C, hs);
    const auto v = head_slice(qkv, 2, b, h, Tt, C, hs);
    auto dq = head_slice(dqkv, 0, b, h, Tt, C, hs);
    auto dk = head_slice(dqkv, 1, b, h, Tt, C, hs);
    auto dv = head_slice(dqkv, 2, b, h, Tt, C, hs);
    const ConstStridedMap<T> dout_h(dout + size_t(b) * Tt * C + size_t(h) * hs, Tt, hs,
                                    Eigen::OuterStride<>(C));
    const ConstMatrixMap<T> p(att + size_t(bh) * Tt * Tt, Tt, Tt);
    T* ds_buf = scratch<T>(size_t(kQueryBlock) * Tt);
    for (int r0 = 0; r0 < Tt; r0 += kQueryBlock) {
      const int nr = std::min(kQueryBlock, Tt - r0), nk = r0 + nr;
      const auto pb = p.block(r0, 0, nr, nk);
      const auto dob = dout_h.middleRows(r0, nr);
      MatrixMap<T> ds(ds_buf, nr, nk);
      ds.noalias() = dob * v.topRows(nk).transpose();  // dP
      // Softmax backward: dS = P * (dP - rowsum(dP * P)); masked entries get exact zeros.
      for (int i = 0; i < nr; ++i) {
        causal_softmax_backward_row(&ds(i, 0), p.data() + size_t(r0 + i) * Tt, r0 + i, nk);
      }
      dq.middleRows(r0, nr).noalias() += scale * ds * k.topRows(nk);
      dk.topRows(nk).noalias() += scale * ds.transpose() * q.middleRows(r0, nr);
      dv.topRows(nk).noalias() += pb.transpose() * dob;
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
