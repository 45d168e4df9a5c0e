// The host twin of the fused causal attention kernels (core/cuda/flash_attention.h): the
// same tiles in the same per-block order, the same online softmax, LSE and backward
// recomputation (core/cuda/flash_tiling.h, shared with the kernels), the same index maps
// (core/cuda/attention_layout.h), in plain sequential C++ with fp32 arithmetic. It is what
// the tests hold against the CPU attention op without a GPU (tests/core/cuda/
// flash_twin_test.cpp), and what the GPU tests hold the kernels to. Not fast; thread-safe.
//
// Values are floats: for bf16 or fp16 storage the caller passes the stored values widened.
// DT is the storage dtype and KERNEL the kernel to mirror, and so where values are rounded to
// DT (core/cuda/flash_tiling.h: the output, and with tensor_core P, dO and dS); tensor_core
// takes bf16 and fp16 (std::invalid_argument for fp32).
// Shapes as core/backend.h: qkv (B, T, 3C), out and dout (B, T, C), lse (B, NH, T), C = NH hs,
// 1 <= hs <= flash::kMaxHeadSize (std::invalid_argument otherwise).
#pragma once

#include <vector>

#include "core/cuda/flash_tiling.h"
#include "core/dtype.h"

namespace ringstep::cuda {

// One tile a thread block visits: query block QB against key block KB of head BH = b NH + h.
struct FlashTile {
  int bh, qb, kb;
  bool operator==(const FlashTile&) const = default;
};

// out = causal softmax(q k^T / sqrt(hs)) v, rounded to DT (f32, bf16 or f16, round to
// nearest even as core/dtype.h) as the kernel stores it; lse receives each row's
// log-sum-exp (fp32). VISITED, when not null, receives the tiles in the order each thread
// block visits them (blocks in order of (bh, qb)).
void flash_forward_twin(DType dt, flash::FlashKernel kernel, float* out, float* lse,
                        const float* qkv, int B, int T, int C, int NH,
                        std::vector<FlashTile>* visited = nullptr);

// dqkv += the gradient through the op, from dout (fp32) and forward's out (as stored) and
// lse, for storage DT. VISITED as above (blocks in order of (bh, kb)).
void flash_backward_twin(DType dt, flash::FlashKernel kernel, float* dqkv, const float* dout,
                         const float* qkv, const float* out, const float* lse, int B, int T, int C,
                         int NH, std::vector<FlashTile>* visited = nullptr);

}  // namespace ringstep::cuda
