// The tiling and per-element math of the fused causal attention (FlashAttention-2, Dao 2023,
// algorithms 1 and 2), as plain functions that the CUDA kernels (core/cuda/flash_attention.cu)
// and their host twin (core/cuda/flash_twin.h) both call:
// - Each (batch, head) is cut into query blocks of kBlockQ rows and key blocks of kBlockK
//   rows; a tile is one (query block, key block) pair.
// - Forward: one thread block per query block walks key blocks 0, 1, ... up to the one
//   holding its last query. Tiles wholly above the diagonal are never visited. Per query
//   row it keeps the running max m of the scaled scores s and the sum l of exp(s - m)
//   (online softmax, Milakov & Gimelshein 2018), rescaling its output accumulator by
//   exp(m_old - m_new) whenever m grows; at the end O = acc / l and lse = m + log l, the
//   one value per row that it saves (no T x T matrix).
// - Backward: one thread block per key block walks query blocks from the diagonal down,
//   recomputes P = exp(s - lse) tile by tile, dP = dO V^T, dS = P o (dP - D) with
//   D = rowsum(dO o O) (computed once, before), and accumulates dV += P^T dO and
//   dK += scale dS^T Q in registers and dQ += scale dS K in global memory.
// Rows past T (the last block's padding) see no key; keys past T are never visible either,
// since visible keys satisfy k <= q < T.
//
// Two kernels do this arithmetic (FlashKernel), and where they round differs:
// - simt: fp32 multiply-adds on fp32 tiles, for any storage (the backend runs it for fp32).
//   Only the output is rounded to the storage dtype.
// - tensor_core: the five products on tensor cores (WMMA, 16-bit operands of the storage
//   dtype, fp32 accumulation), for bf16 and fp16 storage (not fp32). Their 16-bit operands
//   round to the storage dtype (to nearest even, as core/dtype.h), besides the output: P in
//   forward (the row sum l adds the unrounded values), dO in backward (D too), and P and dS
//   where they enter backward's products, as the CPU's 16-bit attention rounds P, dO and dS
//   (core/cpu/attention16.h). q, k and v are stored values already; scores, the softmax,
//   its row statistics, the LSE and every accumulator are fp32.
// fp16's range (largest finite 65504, from 65520 on inf; subnormals from 2^-24 to 2^-14, so
// magnitudes up to 2^-25 round to zero and those below 2^-14 keep an absolute error up to
// 2^-25), value by value (bf16 has fp32's exponent range: none of this applies to it):
// - out is a convex combination of stored v rows (up to P's rounding): within v's range.
// - P lies in [0, 1]: no overflow. Small probabilities lose bits or flush to zero, an
//   absolute error up to 2^-25 each. Forward rounds exp(s - m) under the running max m,
//   never below the normalised P = exp(s - lse) that the CPU rounds (its stored att), so
//   forward's P underflows less here than on the CPU; backward rounds the normalised P,
//   the value the CPU rounds.
// - dO and dS carry the loss scale: beyond 65504 they round to +-inf, the gradient comes out
//   inf or NaN, and the loss scaler skips the step and lowers its scale, as on the CPU,
//   whose fp16 attention rounds the same dO and the same dS = P (dP - D) (computed there as
//   P (dP - sum P dP), equal but for fp32 rounding). Magnitudes up to 2^-25 flush to zero,
//   as any fp16 gradient's do; raising them out of that range is the loss scale's job.
// The host twin (core/cuda/flash_twin.h) rounds exactly these values, with core/dtype.h. It
// is held to the CPU op on any machine (tests/core/cuda/flash_twin_test.cpp); the kernels
// are held to it only on a GPU (flash_attention_cudatest.cpp), which the fp16 tensor-core
// kernel has yet to see.
#pragma once

#include <math.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "core/host_device.h"

namespace ringstep::cuda::flash {

enum class FlashKernel { simt, tensor_core };

constexpr int kBlockQ = 64;  // query rows per tile
constexpr int kBlockK = 64;  // key rows per tile
// Head sizes beyond this are not built (their tiles would not fit in shared memory).
constexpr int kMaxHeadSize = 128;

RINGSTEP_HD constexpr int num_blocks(int T, int rows) { return (T + rows - 1) / rows; }

// Forward: query block QB visits key blocks [0, key_block_end(QB, T)), the blocks that hold
// a key <= its last query.
RINGSTEP_HD constexpr int key_block_end(int qb, int T) {
  const int end = (qb + 1) * kBlockQ;
  const int last_query = (end < T ? end : T) - 1;
  return last_query / kBlockK + 1;
}

// Backward: key block KB visits query blocks [query_block_begin(KB), num_blocks(T, kBlockQ)),
// the blocks that hold a query >= its first key.
RINGSTEP_HD constexpr int query_block_begin(int kb) { return kb * kBlockK / kBlockQ; }

// Whether query Q attends to key K (causal mask; padding rows q >= T attend to nothing).
RINGSTEP_HD constexpr bool visible(int q, int k, int T) { return k <= q && q < T; }

// Head size HS padded to the kernels' register tile width: 16, 32, 64 or 128 (0 beyond
// kMaxHeadSize). Padding columns hold zeros and are never stored.
RINGSTEP_HD constexpr int padded_head_size(int hs) {
  int hp = 16;
  while (hp < hs) hp *= 2;
  return hs >= 1 && hp <= kMaxHeadSize ? hp : 0;
}

// The head size C / NH of FN's arguments (host code: the kernels' launcher and their twin);
// std::invalid_argument unless padded_head_size takes it.
inline int head_size(const char* fn, int C, int NH) {
  const int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
  if (padded_head_size(hs) == 0)
    throw std::invalid_argument(std::string(fn) + ": head size of C = " + std::to_string(C) +
                                ", NH = " + std::to_string(NH) + " must be in [1, " +
                                std::to_string(kMaxHeadSize) + "]");
  return hs;
}

// Online softmax. Factor by which a row's accumulator and sum shrink when its running max
// moves from M_OLD to M_NEW (0 while nothing was seen: the accumulator is still zero).
RINGSTEP_HD float rescale_factor(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}
// exp(s - m) for a score S under running max M; a masked score (-inf) gives exactly 0.
RINGSTEP_HD float block_prob(float s, float m) { return s == -INFINITY ? 0.0f : expf(s - m); }
// The saved statistic: log sum_k exp(s_k) = m + log l.
RINGSTEP_HD float row_lse(float m, float l) { return m + logf(l); }

// Backward: P recomputed from the scaled score S and its row's LSE, and the score gradient
// dS = P (dP - D), D = rowsum(dO o O) = rowsum(P o dP) (Dao 2023, eq. 4).
RINGSTEP_HD float recomputed_prob(float s, float lse) { return expf(s - lse); }
RINGSTEP_HD float score_grad(float p, float dp, float d) { return p * (dp - d); }

// Shared memory of one thread block. Tiles are [rows][stride]; the strides pad rows so that
// consecutive rows start in different banks (simt: HP + 1 floats) or keep WMMA's
// 32-byte alignment (tensor_core: multiples of 16 bytes plus 16).
// simt, fp32 tiles: forward Q, K, V and P [kBlockQ][kBlockK + 1]; backward K, V, Q, dO,
// one [kBlockK][kBlockQ + 1] tile for P^T then dS^T, and the query block's LSE and D.
RINGSTEP_HD constexpr int simt_stride(int hp) { return hp + 1; }
RINGSTEP_HD constexpr size_t simt_forward_smem_bytes(int hp) {
  return 4 * (size_t(kBlockQ + 2 * kBlockK) * simt_stride(hp) + size_t(kBlockQ) * (kBlockK + 1));
}
RINGSTEP_HD constexpr size_t simt_backward_smem_bytes(int hp) {
  return 4 * (size_t(2 * kBlockK + 2 * kBlockQ) * simt_stride(hp) +
              size_t(kBlockK) * (kBlockQ + 1) + 2 * kBlockQ);
}
// tensor_core: 16-bit head tiles (stride HP + 8), fp32 score tiles (kBlockK + 4), 16-bit
// probability tiles (kBlockK + 8), fp32 head accumulators (HP + 4). Forward: Q, K, V, S,
// P, O. Backward: K, V, Q, dO, S^T, dP^T, P^T, dS^T, dQ, and the query block's LSE and D.
RINGSTEP_HD constexpr int tc_head_stride(int hp) { return hp + 8; }
RINGSTEP_HD constexpr int tc_acc_stride(int hp) { return hp + 4; }
constexpr int kTcScoreStride = kBlockK + 4;
constexpr int kTcProbStride = kBlockK + 8;
RINGSTEP_HD constexpr size_t tc_forward_smem_bytes(int hp) {
  return 2 * size_t(kBlockQ + 2 * kBlockK) * tc_head_stride(hp) +
         4 * size_t(kBlockQ) * kTcScoreStride + 2 * size_t(kBlockQ) * kTcProbStride +
         4 * size_t(kBlockQ) * tc_acc_stride(hp);
}
RINGSTEP_HD constexpr size_t tc_backward_smem_bytes(int hp) {
  return 2 * size_t(2 * kBlockK + 2 * kBlockQ) * tc_head_stride(hp) +
         2 * 4 * size_t(kBlockK) * kTcScoreStride + 2 * 2 * size_t(kBlockK) * kTcProbStride +
         4 * size_t(kBlockQ) * tc_acc_stride(hp) + 4 * 2 * size_t(kBlockQ);
}

}  // namespace ringstep::cuda::flash
