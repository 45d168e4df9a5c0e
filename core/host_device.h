// RINGSTEP_HD marks a small inline function that CUDA kernels and plain C++ both call (the
// per-element math of a kernel and its CPU twin). Plain C++ outside nvcc.
#pragma once

#if defined(__CUDACC__)
#define RINGSTEP_HD __host__ __device__ inline
#else
#define RINGSTEP_HD inline
#endif
