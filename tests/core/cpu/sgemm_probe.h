// Whether this machine's sgemm (sgemm.h, the kernel the model's products run on) is
// thread-count invariant, for tests that assert bits across thread counts, and the
// relative difference they fall back to where it is not. Our kernel always is; OpenBLAS
// splits M and N only, never K, yet on some CPUs (AMD Zen 3 with OpenBLAS's Zen kernels,
// docs/perf-log.md section 14b) a row of C lands in an edge kernel with another summation order
// when the split moves, so its bits follow the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/sgemm.h"
#include "core/threads.h"

namespace ringstep::test {

// One and two threads give the same bits for products of the tests' shapes (row-major,
// no transposes). Restores the compute thread count it found.
inline bool SgemmThreadInvariant() {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
#else
  const int saved = 1;
#endif
  bool same = true;
  for (auto [M, N, K] : {std::array{512, 64, 64}, {64, 192, 512}, {512, 384, 384}}) {
    std::vector<float> a(size_t(M) * K), b(size_t(K) * N), c1(size_t(M) * N), c2(c1.size());
    for (float& x : a) x = nd(gen);
    for (float& x : b) x = nd(gen);
    for (auto [threads, c] : {std::pair{1, &c1}, {2, &c2}}) {
      set_compute_threads(threads);
      cpu::sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c->data(), N);
    }
    same = same && std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0;
  }
  set_compute_threads(saved);
  return same;
}

// max |a - b| / max |b| over two results of the same computation.
inline double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return diff / scale;
}

}  // namespace ringstep::test
