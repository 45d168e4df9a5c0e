// Measures this CPU's single-thread SGEMM throughput through the same path the model's
// matrix products take (Eigen, handing off to OpenBLAS when EIGEN_USE_BLAS is on). MFU's
// denominator on the CPU is this number times the compute threads (docs/metrics.md).
#pragma once

namespace ringstep {

// Best of REPEATS timed SGEMMs of size DIM^3, in GFLOP/s, on one thread; restores the
// thread count to THREADS_AFTER afterwards.
double measure_sgemm_gflops(int dim, int repeats, int threads_after);

}  // namespace ringstep
