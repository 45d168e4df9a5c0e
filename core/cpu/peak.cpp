#include "core/cpu/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#ifdef RINGSTEP_HAVE_BLAS
#include <cblas.h>
#endif

#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm.h"
#include "core/threads.h"

namespace ringstep {
namespace {

// GFLOP/s of GEMM(), a DIM^3 product, on one thread: warm-up first (page in, and keep the
// core busy long enough, 0.5 s, for its clock to ramp up; a shared host's speed also drifts
// within minutes, docs/perf.md), then the best of REPEATS timed calls. Restores the thread
// count to THREADS_AFTER.
template <typename F>
double best_gflops(F&& gemm, int dim, int repeats, int threads_after) {
  set_compute_threads(1);
  const auto warm_start = std::chrono::steady_clock::now();
  do {
    gemm();
  } while (std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(500));
  double best_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    gemm();
    auto t1 = std::chrono::steady_clock::now();
    best_s = std::min(best_s, std::chrono::duration<double>(t1 - t0).count());
  }
  set_compute_threads(threads_after);
  return 2.0 * double(dim) * dim * dim / best_s / 1e9;
}

// Whether measure_sgemm_gflops also times cblas_sgemm: where sgemm runs our kernel and the
// build has BLAS.
bool probe_adds_openblas() {
#ifdef RINGSTEP_HAVE_BLAS
  return cpu::sgemm_runs_ours();
#else
  return false;
#endif
}

}  // namespace

double measure_sgemm_gflops(int dim, int repeats, int threads_after) {
  const size_t n = size_t(dim) * dim;
  std::vector<float> a(n), b(n), c(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(i % 89) / 89.0f - 0.5f;
    b[i] = float(i % 97) / 97.0f - 0.5f;
  }
  double gflops = best_gflops(
      [&] {
        cpu::sgemm(false, false, dim, dim, dim, 1.0f, a.data(), dim, b.data(), dim, 0.0f, c.data(),
                   dim);
      },
      dim, repeats, threads_after);
#ifdef RINGSTEP_HAVE_BLAS
  if (probe_adds_openblas()) {
    gflops =
        std::max(gflops, best_gflops(
                             [&] {
                               cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim,
                                           1.0f, a.data(), dim, b.data(), dim, 0.0f, c.data(), dim);
                             },
                             dim, repeats, threads_after));
  }
#endif
  volatile float sink = c[0];
  (void)sink;
  return gflops;
}

double measure_matmul_peak_gflops(DType dt, int dim, int repeats, int threads_after) {
  if (dt == DType::f32 || cpu::gemm16_widens(dt))
    return measure_sgemm_gflops(dim, repeats, threads_after);
  const size_t n = size_t(dim) * dim;
  std::vector<uint16_t> a(n);
  std::vector<float> src(n), c(n);
  for (size_t i = 0; i < n; ++i) src[i] = float(i % 97) / 97.0f - 0.5f;
  narrow_from_fp32(dt, src.data(), a.data(), n);
  const std::vector<uint16_t> b = a;
  return best_gflops(
      [&] {
        cpu::gemm16(dt, false, true, dim, dim, dim, 1.0f, a.data(), dim, b.data(), dim, 0.0f,
                    c.data(), dim);
      },
      dim, repeats, threads_after);
}

std::string matmul_peak_kernel(DType dt) {
  if (dt != DType::f32 && !cpu::gemm16_widens(dt)) return cpu::gemm16_kernel(dt);
  if (!cpu::sgemm_runs_ours()) return "SGEMM (OpenBLAS)";
  if (!probe_adds_openblas()) return std::string("SGEMM (") + cpu::sgemm_kernel() + ")";
  return std::string("SGEMM (best of ") + cpu::sgemm_kernel() + " and OpenBLAS)";
}

}  // namespace ringstep
