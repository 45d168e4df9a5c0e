// Fused causal self-attention on the GPU (FlashAttention-2, Dao 2023): no T x T matrix in
// memory, tiles above the causal diagonal never computed, q, k, v read in place from the
// (B, T, 3C) qkv tensor and the output written in place into (B, T, C) (layouts:
// core/cuda/attention_layout.h; tiling, and where each kernel rounds:
// core/cuda/flash_tiling.h; host twin: core/cuda/flash_twin.h). All device pointers; both
// functions launch on STREAM and return without waiting, and allocate nothing. DT is the
// storage of qkv and out: f32, bf16 or f16 (widened on load; out rounded to nearest even as
// core/dtype.h). KERNEL: simt (fp32 arithmetic, any storage) or tensor_core (products on
// 16-bit operands of the storage type with fp32 accumulation; bf16 or fp16 storage, not
// fp32). Head size C / NH in [1, flash::kMaxHeadSize].
// Bad arguments throw std::invalid_argument. Declared only in builds with the CUDA backend.
#pragma once

#if defined(RINGSTEP_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>

#include "core/cuda/flash_tiling.h"
#include "core/dtype.h"

namespace ringstep::cuda {

// The kernel the backend runs for storage DT: tensor cores for bf16 and fp16, SIMT for fp32.
inline flash::FlashKernel flash_kernel_for(DType dt) {
  return dt == DType::f32 ? flash::FlashKernel::simt : flash::FlashKernel::tensor_core;
}

// out (B, T, C) = causal softmax(q k^T / sqrt(hs)) v, heads side by side, stored as DT;
// lse (B, NH, T, fp32) = each query row's log-sum-exp of its scaled scores.
void flash_attention_forward(flash::FlashKernel kernel, DType dt, void* out, float* lse,
                             const void* qkv, int B, int T, int C, int NH, cudaStream_t stream);

// dqkv (B, T, 3C, fp32) += the gradient through the op, from dout (B, T, C, fp32) and
// forward's out (as stored) and lse, with the kernel forward used. DSUM is scratch for
// B NH T floats (D = rowsum(dO o O)). dq adds with atomics (several key blocks add into one
// query row), so its low bits may differ from run to run; dk and dv do not.
void flash_attention_backward(flash::FlashKernel kernel, DType dt, float* dqkv, const float* dout,
                              const void* qkv, const void* out, const float* lse, float* dsum,
                              int B, int T, int C, int NH, cudaStream_t stream);

}  // namespace ringstep::cuda

#endif
