// Measures this CPU's single-thread SGEMM throughput through the same path the model's
// matrix products take (Eigen, handing off to OpenBLAS when EIGEN_USE_BLAS is on). MFU's
// denominator on the CPU is this number times the compute threads (docs/metrics.md).
#pragma once

#include "core/dtype.h"

namespace ringstep {

// Best of REPEATS timed SGEMMs of size DIM^3, in GFLOP/s, on one thread; restores the
// thread count to THREADS_AFTER afterwards.
double measure_sgemm_gflops(int dim, int repeats, int threads_after);

// The peak of the kernel the model's matrix products use with activations of dtype DT:
// SGEMM for fp32 and for dtypes gemm16 runs through SGEMM (fp16, or bf16 without AMX),
// gemm16's bf16 kernel otherwise. Same protocol as measure_sgemm_gflops.
double measure_matmul_peak_gflops(DType dt, int dim, int repeats, int threads_after);

}  // namespace ringstep
