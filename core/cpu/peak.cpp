#include "core/cpu/peak.h"

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>

#include "core/threads.h"

namespace ringstep {

double measure_sgemm_gflops(int dim, int repeats, int threads_after) {
  set_compute_threads(1);
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(dim, dim);
  Eigen::MatrixXf b = Eigen::MatrixXf::Random(dim, dim);
  Eigen::MatrixXf c(dim, dim);
  // Warm-up: page in, and keep the core busy long enough (0.5 s) for its clock to ramp up;
  // this host's speed also drifts by up to 1.5x within minutes (docs/perf.md).
  const auto warm_start = std::chrono::steady_clock::now();
  do {
    c.noalias() = a * b;
  } while (std::chrono::steady_clock::now() - warm_start < std::chrono::milliseconds(500));
  double best_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    auto t1 = std::chrono::steady_clock::now();
    best_s = std::min(best_s, std::chrono::duration<double>(t1 - t0).count());
  }
  set_compute_threads(threads_after);
  volatile float sink = c(0, 0);
  (void)sink;
  return 2.0 * double(dim) * dim * dim / best_s / 1e9;
}

}  // namespace ringstep
