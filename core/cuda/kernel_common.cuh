// What every CUDA kernel file shares (include only from core/cuda/*.cu, through kernels.cuh
// or directly): S is the storage type of "stored" tensors: float, uint16_t holding bf16
// bits, or Fp16 holding IEEE half bits; widen reads one as fp32, narrow<S> rounds to it
// exactly as core/dtype.h does. Warp reductions over all 32 lanes (callers keep whole warps
// converged).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace ringstep::cuda::kernels {

// The bits of an IEEE half: a type of its own, so that widen and narrow tell it from bf16.
struct Fp16 {
  uint16_t bits;
};
static_assert(sizeof(Fp16) == 2);

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ float widen(Fp16 h) { return __half2float(__ushort_as_half(h.bits)); }

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
// core/dtype.cpp's fp32_to_fp16: hardware cvt.rn rounds (nearest even, subnormals kept);
// NaNs are rebuilt the way the CPU (x86 F16C) quiets them, where the hardware returns one
// canonical NaN.
template <>
__device__ __forceinline__ Fp16 narrow<Fp16>(float x) {
  const uint32_t b = __float_as_uint(x);
  return {(b & 0x7FFFFFFFu) > 0x7F800000u
              ? uint16_t(((b >> 16) & 0x8000u) | 0x7E00u | ((b >> 13) & 0x3FFu))
              : __half_as_ushort(__float2half_rn(x))};
}

// Calls FN.template operator()<S>() with S the storage type of DT (host code).
template <typename Fn>
void with_storage(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32:
      return fn.template operator()<float>();
    case DType::bf16:
      return fn.template operator()<uint16_t>();
    case DType::f16:
      return fn.template operator()<Fp16>();
  }
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
