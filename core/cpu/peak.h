// Measures this CPU's single-thread SGEMM throughput: the best of sgemm as the model's
// products call it (sgemm.h) and, where that is our kernel and the build has BLAS,
// OpenBLAS's cblas_sgemm, so that MFU is never flattered by a slow probe. MFU's
// denominator on the CPU is this number times the compute threads (docs/metrics.md).
#pragma once

#include <string>

#include "core/dtype.h"

namespace ringstep {

// Best of REPEATS timed SGEMMs of size DIM^3 (per kernel, above), in GFLOP/s, on one
// thread; restores the thread count to THREADS_AFTER afterwards.
double measure_sgemm_gflops(int dim, int repeats, int threads_after);

// The peak of the kernel the model's matrix products use with activations of dtype DT:
// SGEMM for fp32 and for dtypes gemm16 runs through SGEMM (fp16, or bf16 without AMX or
// AVX512-BF16), gemm16's bf16 kernel otherwise. Same protocol as measure_sgemm_gflops.
double measure_matmul_peak_gflops(DType dt, int dim, int repeats, int threads_after);

// What measure_matmul_peak_gflops times for DT, for the log header: gemm16's bf16 kernel,
// "SGEMM (OpenBLAS)", or "SGEMM (best of <our kernel> and OpenBLAS)".
std::string matmul_peak_kernel(DType dt);

}  // namespace ringstep
