// Pieces shared by the fp32 attention (ops_attention.cpp) and the 16-bit one
// (attention16.cpp), internal to core/cpu/: the query block, the per-head loop's thread
// count and the causal softmax rows, forward and backward.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <limits>

#include "core/cpu/eigen_maps.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ringstep::cpu::attention_rows {

// Query rows go in blocks of this many: block [r0, r0 + nr) attends to keys [0, r0 + nr).
constexpr int kQueryBlock = 64;

// OpenMP threads for the per-head loop (1 when there is a single pair).
inline int head_loop_threads(int pairs) {
#ifdef _OPENMP
  return pairs > 1 ? omp_get_max_threads() : 1;
#else
  return 1;
#endif
}

// Row t has t + 1 live entries. The row loops below run over that length rounded up to
// kRowPad (one AVX-512 packet of floats), padded with entries that contribute nothing, so
// Eigen's vector loops (exp above all) get no scalar remainder. The rounded length never
// passes LIMIT (a block that is not the last ends on a multiple of 64).
constexpr int kRowPad = 16;
inline int padded_length(int live, int limit) {
  return std::min(limit, (live + kRowPad - 1) / kRowPad * kRowPad);
}

// Softmax in place over row[0..t] (the keys query t may see); exact zeros in
// row[t+1..limit).
template <typename T>
void causal_softmax_row(T* row, int t, int limit) {
  const int len = padded_length(t + 1, limit);
  std::fill(row + t + 1, row + len, -std::numeric_limits<T>::infinity());
  ArrayMap<T> r(row, len);
  r = (r - r.maxCoeff()).exp();
  std::fill(row + t + 1, row + limit, T(0));  // exact zeros whatever exp(-inf) rounds to
  r *= T(1) / r.sum();
}

// Softmax backward in place on row t of a block: ds[j] = p[j] (dp[j] - sum_k p[k] dp[k]).
// p holds at least padded_length(t + 1, nk) entries, exactly 0 past t, so the padding
// entries come out 0 as well.
template <typename T>
void causal_softmax_backward_row(T* ds, const T* p, int t, int nk) {
  const int len = padded_length(t + 1, nk);
  ArrayMap<T> d(ds, len);
  const ConstArrayMap<T> pr(p, len);
  d = pr * (d - (d * pr).sum());
  std::fill(ds + len, ds + nk, T(0));
}

}  // namespace ringstep::cpu::attention_rows
