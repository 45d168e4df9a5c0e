// What every CUDA kernel file shares (include only from core/cuda/*.cu, through kernels.cuh
// or directly): S is the storage type of "stored" tensors, float or uint16_t holding bf16
// bits; widen reads one as fp32, narrow<S> rounds to it exactly as core/dtype.h does. Warp
// reductions over all 32 lanes (callers keep whole warps converged).
#pragma once

#include <cstdint>

namespace ringstep::cuda::kernels {

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

template <typename S>
__device__ __forceinline__ S narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) {
  return x;
}
// core/dtype.cpp's fp32_to_bf16: round to nearest even; NaN stays NaN (quiet bit set).
template <>
__device__ __forceinline__ uint16_t narrow<uint16_t>(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? uint16_t((b >> 16) | 0x40u)
                                         : uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ int warp_row() {
  return blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
}

}  // namespace ringstep::cuda::kernels
