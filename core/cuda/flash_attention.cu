// The fused causal attention kernels (core/cuda/flash_attention.h): FlashAttention-2's
// forward and backward (Dao 2023, algorithms 1 and 2) on tiles held in shared memory, in two
// versions: fp32 SIMT arithmetic (any storage), and 16-bit products on tensor cores through
// WMMA (further down; bf16 or fp16 storage). What they compute, tile by tile, is
// core/cuda/flash_tiling.h's functions, shared with the host twin (core/cuda/flash_twin.cpp);
// this file maps that onto threads.
//
// Thread mapping: 256 threads as 16 x 16, thread (ty, tx) = (tid / 16, tid % 16). In a
// 64 x 64 score tile it owns rows ty + 16 i and columns tx + 16 j (i, j < 4); in a 64 x HP
// head tile (HP = head size padded to 16, 32, 64 or 128) rows ty + 16 i and columns
// tx + 16 c (c < HP / 16). Strided ownership keeps a half-warp on 16 consecutive columns
// (no shared-memory bank conflicts, with tile rows padded to HP + 1 floats) and puts a
// whole score row in one half-warp, so a row's max and sum are four shuffles.
#include "core/cuda/flash_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/cuda/attention_layout.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/flash_tiling.h"
#include "core/cuda/kernel_common.cuh"

namespace ringstep::cuda {
namespace {

using namespace flash;
using kernels::narrow;
using kernels::widen;

constexpr int kThreads = 256;
constexpr int kSide = 16;                  // threads per side of the 16 x 16 layout
constexpr int kTile = 64;                  // rows (and score columns) of every tile
constexpr int kPerThread = kTile / kSide;  // rows (and score columns) per thread
constexpr int kProbStride = kBlockK + 1;
static_assert(kBlockQ == kTile && kBlockK == kTile, "the thread mapping assumes 64-row tiles");

// Reductions over the 16 lanes that share a score row (lanes differing in their low 4 bits).
__device__ __forceinline__ float row_max(float v) {
  for (int o = kSide / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int o = kSide / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// tile[r][d] (row stride kLd) = load(t0 + r, d), zero for rows past T and for the head's
// padding columns d >= hs. Consecutive threads read consecutive d: coalesced.
template <int kHp, int kLd, typename E, typename Load>
__device__ void load_tile(E* tile, int t0, int T, int hs, Load load) {
  for (int i = threadIdx.x; i < kTile * kHp; i += kThreads) {
    const int r = i / kHp, d = i % kHp, t = t0 + r;
    tile[r * kLd + d] = t < T && d < hs ? load(t, d) : E(0);
  }
}

// acc[i][c] += sum over r < kTile of P(ty + kSide i, r) X[r][tx + kSide c]: one tile
// product of the SIMT kernels, from shared memory into this thread's accumulators. P(row, r)
// is p[row * row_stride + r * col_stride], so the same loop reads a tile or its transpose;
// X has row stride LD.
template <int kChunks>
__device__ __forceinline__ void add_tile_product(float (&acc)[kPerThread][kChunks],
                                                 const float* p, int row_stride, int col_stride,
                                                 const float* x, int ld, int tx, int ty) {
#pragma unroll 4
  for (int r = 0; r < kTile; ++r) {
    float xv[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) xv[c] = x[r * ld + tx + kSide * c];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const float pv = p[(ty + kSide * i) * row_stride + r * col_stride];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[i][c] += pv * xv[c];
    }
  }
}

// The dynamic shared memory of every kernel here (one declaration: they must all agree),
// aligned for WMMA's 256-bit loads.
__device__ __forceinline__ unsigned char* shared_base() {
  extern __shared__ __align__(128) unsigned char flash_smem[];
  return flash_smem;
}

// One thread block per (query block, batch x head). Grid (B NH, query blocks), the query
// blocks with the most key blocks first, so the short ones fill the tail.
template <typename S, int kHp>
__global__ void __launch_bounds__(kThreads)
    simt_forward_kernel(S* out, float* lse, const S* qkv, int T, int NH, int hs, float scale) {
  constexpr int kChunks = kHp / kSide, ld = simt_stride(kHp);
  float* Qs = reinterpret_cast<float*>(shared_base());  // [kTile][ld]
  float* Ks = Qs + kTile * ld;                          // [kTile][ld]
  float* Vs = Ks + kTile * ld;                          // [kTile][ld]
  float* Ps = Vs + kTile * ld;  // [kTile][kProbStride], exp(s - m) of this tile
  const int C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int qb = gridDim.y - 1 - blockIdx.y, q0 = qb * kBlockQ;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;

  load_tile<kHp, ld>(Qs, q0, T, hs,
                     [&](int t, int d) { return widen(qkv[qkv_index(b, t, 0, h, d, T, C, hs)]); });
  float acc[kPerThread][kChunks], m[kPerThread], l[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[i][c] = 0.0f;
  }

  const int kb_end = key_block_end(qb, T);
  for (int kb = 0; kb < kb_end; ++kb) {
    const int k0 = kb * kBlockK;
    __syncthreads();  // the previous tile's reads of Ks, Vs and Ps are done
    load_tile<kHp, ld>(Ks, k0, T, hs, [&](int t, int d) {
      return widen(qkv[qkv_index(b, t, 1, h, d, T, C, hs)]);
    });
    load_tile<kHp, ld>(Vs, k0, T, hs, [&](int t, int d) {
      return widen(qkv[qkv_index(b, t, 2, h, d, T, C, hs)]);
    });
    __syncthreads();

    // S = Q K^T for this thread's 4 x 4 scores, summed over d in order (as the twin).
    float s[kPerThread][kPerThread] = {};
#pragma unroll 4
    for (int d = 0; d < kHp; ++d) {
      float qv[kPerThread], kv[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        qv[i] = Qs[(ty + kSide * i) * ld + d];
        kv[i] = Ks[(tx + kSide * i) * ld + d];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) s[i][j] += qv[i] * kv[j];
    }

    // Online softmax per row: new max, rescale what was summed so far, this tile's exps.
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kSide * i, q = q0 + r;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        s[i][j] = visible(q, k0 + tx + kSide * j, T) ? s[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_max(mx));
      const float alpha = rescale_factor(m[i], m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const float p = block_prob(s[i][j], m_new);
        Ps[r * kProbStride + tx + kSide * j] = p;
        sum += p;
      }
      l[i] = alpha * l[i] + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();

    // acc += P V over this tile's keys.
    add_tile_product(acc, Ps, kProbStride, 1, Vs, ld, tx, ty);
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int q = q0 + ty + kSide * i;
    if (q >= T) continue;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = tx + kSide * c;
      if (d < hs) out[btc_index(b, q, h, d, T, C, hs)] = narrow<S>(acc[i][c] / l[i]);
    }
    if (tx == 0) lse[row_index(bh, q, T)] = row_lse(m[i], l[i]);
  }
}

// D[bh, t] = sum_d dout[b, t, h, d] out[b, t, h, d]: one warp per (head, query row). With
// kRoundDout, dO as the tensor-core kernel reads it: rounded to the 16-bit storage S.
template <typename S, bool kRoundDout>
__global__ void backward_dsum_kernel(float* dsum, const float* dout, const S* out, int T, int NH,
                                     int hs, int rows) {
  const int lane = threadIdx.x % 32, row = kernels::warp_row();
  if (row >= rows) return;
  const int bh = row / T, t = row % T, b = bh / NH, h = bh % NH, C = NH * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) {
    const size_t at = btc_index(b, t, h, d, T, C, hs);
    const float g = kRoundDout ? widen(narrow<S>(dout[at])) : dout[at];
    s += g * widen(out[at]);
  }
  s = kernels::warp_sum(s);
  if (lane == 0) dsum[row_index(bh, t, T)] = s;
}

// One thread block per (key block, batch x head), grid (B NH, key blocks); key block 0, which
// sees every query block, first. It keeps its K and V tiles and its dK, dV accumulators for
// the whole walk down the query blocks and adds dK, dV into dqkv once at the end (no other
// block owns those keys); each tile's dQ share is added with atomics.
template <typename S, int kHp>
__global__ void __launch_bounds__(kThreads)
    simt_backward_kernel(float* dqkv, const float* dout, const S* qkv, const float* lse,
                         const float* dsum, int T, int NH, int hs, float scale) {
  constexpr int kChunks = kHp / kSide, ld = simt_stride(kHp);
  float* Ks = reinterpret_cast<float*>(shared_base());  // [kTile][ld]
  float* Vs = Ks + kTile * ld;                          // [kTile][ld]
  float* Qs = Vs + kTile * ld;                          // [kTile][ld]
  float* dOs = Qs + kTile * ld;                         // [kTile][ld]
  float* Ps = dOs + kTile * ld;             // [kTile][kProbStride]: P^T, then dS^T (key rows)
  float* lse_s = Ps + kTile * kProbStride;  // [kTile] of the query block
  float* d_s = lse_s + kTile;               // [kTile]
  const int C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int kb = blockIdx.y, k0 = kb * kBlockK;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;

  load_tile<kHp, ld>(Ks, k0, T, hs,
                     [&](int t, int d) { return widen(qkv[qkv_index(b, t, 1, h, d, T, C, hs)]); });
  load_tile<kHp, ld>(Vs, k0, T, hs,
                     [&](int t, int d) { return widen(qkv[qkv_index(b, t, 2, h, d, T, C, hs)]); });
  float dk[kPerThread][kChunks], dv[kPerThread][kChunks];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i)
#pragma unroll
    for (int c = 0; c < kChunks; ++c) dk[i][c] = dv[i][c] = 0.0f;

  const int qb_end = num_blocks(T, kBlockQ);
  for (int qb = query_block_begin(kb); qb < qb_end; ++qb) {
    const int q0 = qb * kBlockQ;
    __syncthreads();  // the previous tile's reads of Qs, dOs, Ps, lse_s and d_s are done
    load_tile<kHp, ld>(Qs, q0, T, hs, [&](int t, int d) {
      return widen(qkv[qkv_index(b, t, 0, h, d, T, C, hs)]);
    });
    load_tile<kHp, ld>(dOs, q0, T, hs,
                       [&](int t, int d) { return dout[btc_index(b, t, h, d, T, C, hs)]; });
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
      const int q = q0 + r;
      lse_s[r] = q < T ? lse[row_index(bh, q, T)] : 0.0f;
      d_s[r] = q < T ? dsum[row_index(bh, q, T)] : 0.0f;
    }
    __syncthreads();

    // The transposed tile: this thread's keys ty + 16 i against queries tx + 16 j.
    // S^T = K Q^T and dP^T = V dO^T, then P^T from the saved LSE and dS^T.
    float s[kPerThread][kPerThread] = {}, dp[kPerThread][kPerThread] = {};
#pragma unroll 4
    for (int d = 0; d < kHp; ++d) {
      float kv[kPerThread], vv[kPerThread], qv[kPerThread], gv[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        kv[i] = Ks[(ty + kSide * i) * ld + d];
        vv[i] = Vs[(ty + kSide * i) * ld + d];
        qv[i] = Qs[(tx + kSide * i) * ld + d];
        gv[i] = dOs[(tx + kSide * i) * ld + d];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          s[i][j] += kv[i] * qv[j];
          dp[i][j] += vv[i] * gv[j];
        }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int kr = ty + kSide * i, qc = tx + kSide * j;
        const float p =
            visible(q0 + qc, k0 + kr, T) ? recomputed_prob(s[i][j] * scale, lse_s[qc]) : 0.0f;
        Ps[kr * kProbStride + qc] = p;
        s[i][j] = score_grad(p, dp[i][j], d_s[qc]);  // dS^T, stored below once P^T is used
      }
    __syncthreads();

    // dV += P^T dO
    add_tile_product(dv, Ps, kProbStride, 1, dOs, ld, tx, ty);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        Ps[(ty + kSide * i) * kProbStride + tx + kSide * j] = s[i][j];
    __syncthreads();

    // dK += dS^T Q (scaled once, at the end)
    add_tile_product(dk, Ps, kProbStride, 1, Qs, ld, tx, ty);

    // dQ += scale dS K for query rows ty + 16 i: read dS^T by columns.
    float dq[kPerThread][kChunks] = {};
    add_tile_product(dq, Ps, 1, kProbStride, Ks, ld, tx, ty);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int q = q0 + ty + kSide * i;
      if (q >= T) continue;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int d = tx + kSide * c;
        if (d < hs) atomicAdd(&dqkv[qkv_index(b, q, 0, h, d, T, C, hs)], scale * dq[i][c]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int k = k0 + ty + kSide * i;
    if (k >= T) continue;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = tx + kSide * c;
      if (d >= hs) continue;
      dqkv[qkv_index(b, k, 1, h, d, T, C, hs)] += scale * dk[i][c];
      dqkv[qkv_index(b, k, 2, h, d, T, C, hs)] += dv[i][c];
    }
  }
}

// --- tensor cores (bf16 or fp16 storage) ---------------------------------------------
// The same tiles, walk and per-row softmax as the SIMT kernels above; the products run on
// WMMA 16 x 16 x 16 fragments (16-bit operands of the storage type, fp32 accumulation)
// between 16-bit operand tiles and fp32 result tiles in shared memory. Operand tiles hold
// the 16-bit patterns (uint16_t) of storage S, read by the fragments as S's WMMA type.
// Results go through shared memory so the SIMT code can read them row by row: the output
// accumulator (forward) and each tile's dQ live there; dK and dV stay in each warp's
// fragments for the whole walk.

namespace wmma = nvcuda::wmma;
using kernels::Fp16;
constexpr int kFrag = 16;  // WMMA's m = n = k
constexpr int kWarps = kThreads / 32;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;
using Rows = wmma::row_major;  // operand layouts in shared memory
using Cols = wmma::col_major;

// The WMMA operand type of 16-bit storage S: bf16 bits (uint16_t) or an IEEE half (Fp16).
template <typename S>
struct WmmaType;
template <>
struct WmmaType<uint16_t> {
  using type = __nv_bfloat16;
};
template <>
struct WmmaType<Fp16> {
  using type = __half;
};

// The 16-bit pattern of a stored value, and X rounded to S as a pattern (core/dtype.h's rule).
__device__ __forceinline__ uint16_t bits(uint16_t x) { return x; }
__device__ __forceinline__ uint16_t bits(Fp16 x) { return x.bits; }
template <typename S>
__device__ __forceinline__ uint16_t narrow_bits(float x) {
  return bits(narrow<S>(x));
}

// acc += A (16 x kK) B (kK x 16) from shared memory, the patterns read as E. A starts at A
// (row-major with stride LDA; or column-major, A(i, k) = a[k lda + i]); B at B (row-major;
// or column-major, B(k, j) = b[j ldb + k]), as LayoutA and LayoutB say.
template <typename E, typename LayoutA, typename LayoutB, int kK>
__device__ __forceinline__ void mma(FragC& acc, const uint16_t* a, int lda, const uint16_t* b,
                                    int ldb) {
  constexpr bool a_rows = std::is_same_v<LayoutA, Rows>;
  constexpr bool b_rows = std::is_same_v<LayoutB, Rows>;
#pragma unroll
  for (int k = 0; k < kK; k += kFrag) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, E, LayoutA> fa;
    wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, E, LayoutB> fb;
    wmma::load_matrix_sync(fa, reinterpret_cast<const E*>(a + (a_rows ? k : k * lda)), lda);
    wmma::load_matrix_sync(fb, reinterpret_cast<const E*>(b + (b_rows ? k * ldb : k)), ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}
// The two of a 64 x 64 score tile's 16 fragments that a warp computes, as (row, column)
// fragment indices: row warp / 2, columns 2 (warp % 2) + f, f = 0, 1.
__device__ __forceinline__ int score_frag_row() { return threadIdx.x / 32 / 2; }
__device__ __forceinline__ int score_frag_col(int f) { return 2 * (threadIdx.x / 32 % 2) + f; }

template <typename S, int kHp>
__global__ void __launch_bounds__(kThreads)
    tc_forward_kernel(S* out, float* lse, const S* qkv, int T, int NH, int hs, float scale) {
  using E = typename WmmaType<S>::type;
  constexpr int kChunks = kHp / kSide, ldh = tc_head_stride(kHp), ldo = tc_acc_stride(kHp);
  constexpr int lds = kTcScoreStride, ldp = kTcProbStride;
  constexpr int kOutFrags = (kTile / kFrag) * (kHp / kFrag);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(shared_base());     // [kTile][ldh] as S
  uint16_t* Ks = Qs + kTile * ldh;                               // [kTile][ldh] as S
  uint16_t* Vs = Ks + kTile * ldh;                               // [kTile][ldh] as S
  float* Ss = reinterpret_cast<float*>(Vs + kTile * ldh);        // [kTile][lds] scores
  uint16_t* Ps = reinterpret_cast<uint16_t*>(Ss + kTile * lds);  // [kTile][ldp] exp(s - m) as S
  float* Os = reinterpret_cast<float*>(Ps + kTile * ldp);        // [kTile][ldo] accumulator
  const int C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int qb = gridDim.y - 1 - blockIdx.y, q0 = qb * kBlockQ;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide, warp = threadIdx.x / 32;

  load_tile<kHp, ldh>(Qs, q0, T, hs,
                      [&](int t, int d) { return bits(qkv[qkv_index(b, t, 0, h, d, T, C, hs)]); });
  for (int i = threadIdx.x; i < kTile * ldo; i += kThreads) Os[i] = 0.0f;
  float m[kPerThread], l[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }

  const int kb_end = key_block_end(qb, T);
  for (int kb = 0; kb < kb_end; ++kb) {
    const int k0 = kb * kBlockK;
    __syncthreads();  // the previous tile's reads of Ks, Vs, Ps and Os are done
    load_tile<kHp, ldh>(
        Ks, k0, T, hs, [&](int t, int d) { return bits(qkv[qkv_index(b, t, 1, h, d, T, C, hs)]); });
    load_tile<kHp, ldh>(
        Vs, k0, T, hs, [&](int t, int d) { return bits(qkv[qkv_index(b, t, 2, h, d, T, C, hs)]); });
    __syncthreads();

    // S = Q K^T (K read column-major as K^T).
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const int fr = score_frag_row(), fc = score_frag_col(f);
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      mma<E, Rows, Cols, kHp>(acc, Qs + fr * kFrag * ldh, ldh, Ks + fc * kFrag * ldh, ldh);
      wmma::store_matrix_sync(Ss + fr * kFrag * lds + fc * kFrag, acc, lds, wmma::mem_row_major);
    }
    __syncthreads();

    // Online softmax per row, as simt_forward_kernel; P enters the product rounded to S, the
    // row sum adds the unrounded values.
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int r = ty + kSide * i, q = q0 + r;
      float s[kPerThread], mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int c = tx + kSide * j;
        s[j] = visible(q, k0 + c, T) ? Ss[r * lds + c] * scale : -INFINITY;
        mx = fmaxf(mx, s[j]);
      }
      const float m_new = fmaxf(m[i], row_max(mx));
      const float alpha = rescale_factor(m[i], m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const float p = block_prob(s[j], m_new);
        Ps[r * ldp + tx + kSide * j] = narrow_bits<S>(p);
        sum += p;
      }
      l[i] = alpha * l[i] + row_sum(sum);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) Os[r * ldo + tx + kSide * c] *= alpha;
    }
    __syncthreads();

    // O += P V, each warp on its own output fragments.
    for (int f = warp; f < kOutFrags; f += kWarps) {
      const int fr = f / (kHp / kFrag), fc = f % (kHp / kFrag);
      FragC acc;
      wmma::load_matrix_sync(acc, Os + fr * kFrag * ldo + fc * kFrag, ldo, wmma::mem_row_major);
      mma<E, Rows, Rows, kTile>(acc, Ps + fr * kFrag * ldp, ldp, Vs + fc * kFrag, ldh);
      wmma::store_matrix_sync(Os + fr * kFrag * ldo + fc * kFrag, acc, ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int r = ty + kSide * i, q = q0 + r;
    if (q >= T) continue;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = tx + kSide * c;
      if (d < hs) out[btc_index(b, q, h, d, T, C, hs)] = narrow<S>(Os[r * ldo + d] / l[i]);
    }
    if (tx == 0) lse[row_index(bh, q, T)] = row_lse(m[i], l[i]);
  }
}

// dqkv[b, t0 + r, part, h, d] += factor * tile[r][d] for the rows before T (atomically when
// other thread blocks add into the same rows).
template <int kHp, int kLd>
__device__ void add_tile(float* dqkv, const float* tile, float factor, int part, int b, int h,
                         int t0, int T, int C, int hs, bool atomic) {
  for (int i = threadIdx.x; i < kTile * kHp; i += kThreads) {
    const int r = i / kHp, d = i % kHp, t = t0 + r;
    if (t >= T || d >= hs) continue;
    float* dst = &dqkv[qkv_index(b, t, part, h, d, T, C, hs)];
    if (atomic)
      atomicAdd(dst, factor * tile[r * kLd + d]);
    else
      *dst += factor * tile[r * kLd + d];
  }
}

template <typename S, int kHp>
__global__ void __launch_bounds__(kThreads)
    tc_backward_kernel(float* dqkv, const float* dout, const S* qkv, const float* lse,
                       const float* dsum, int T, int NH, int hs, float scale) {
  using E = typename WmmaType<S>::type;
  constexpr int ldh = tc_head_stride(kHp), ldo = tc_acc_stride(kHp);
  constexpr int lds = kTcScoreStride, ldp = kTcProbStride;
  constexpr int kAccFrags = (kTile / kFrag) * (kHp / kFrag);  // fragments of a 64 x kHp tile
  constexpr int kMine = (kAccFrags + kWarps - 1) / kWarps;    // ... that one warp owns
  uint16_t* Ks = reinterpret_cast<uint16_t*>(shared_base());  // [kTile][ldh] as S
  uint16_t* Vs = Ks + kTile * ldh;
  uint16_t* Qs = Vs + kTile * ldh;
  uint16_t* dOs = Qs + kTile * ldh;
  float* Ss = reinterpret_cast<float*>(dOs + kTile * ldh);        // [kTile][lds] S^T (key rows)
  float* dPs = Ss + kTile * lds;                                  // [kTile][lds] dP^T
  uint16_t* Ps = reinterpret_cast<uint16_t*>(dPs + kTile * lds);  // [kTile][ldp] P^T as S
  uint16_t* dSs = Ps + kTile * ldp;                               // [kTile][ldp] dS^T as S
  float* Rs = reinterpret_cast<float*>(dSs + kTile * ldp);  // [kTile][ldo] dQ; dK, dV at the end
  float* lse_s = Rs + kTile * ldo;                          // [kTile]
  float* d_s = lse_s + kTile;                               // [kTile]
  const int C = NH * hs, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int kb = blockIdx.y, k0 = kb * kBlockK;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide, warp = threadIdx.x / 32;

  load_tile<kHp, ldh>(Ks, k0, T, hs,
                      [&](int t, int d) { return bits(qkv[qkv_index(b, t, 1, h, d, T, C, hs)]); });
  load_tile<kHp, ldh>(Vs, k0, T, hs,
                      [&](int t, int d) { return bits(qkv[qkv_index(b, t, 2, h, d, T, C, hs)]); });
  FragC dk[kMine], dv[kMine];
#pragma unroll
  for (int n = 0; n < kMine; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }

  const int qb_end = num_blocks(T, kBlockQ);
  for (int qb = query_block_begin(kb); qb < qb_end; ++qb) {
    const int q0 = qb * kBlockQ;
    __syncthreads();  // the previous tile's reads of Qs, dOs, Ps, dSs, Rs, lse_s and d_s are done
    load_tile<kHp, ldh>(
        Qs, q0, T, hs, [&](int t, int d) { return bits(qkv[qkv_index(b, t, 0, h, d, T, C, hs)]); });
    load_tile<kHp, ldh>(dOs, q0, T, hs, [&](int t, int d) {
      return narrow_bits<S>(dout[btc_index(b, t, h, d, T, C, hs)]);
    });
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
      const int q = q0 + r;
      lse_s[r] = q < T ? lse[row_index(bh, q, T)] : 0.0f;
      d_s[r] = q < T ? dsum[row_index(bh, q, T)] : 0.0f;
    }
    __syncthreads();

    // S^T = K Q^T and dP^T = V dO^T (Q and dO read column-major as their transposes).
#pragma unroll
    for (int f = 0; f < 2; ++f) {
      const int fr = score_frag_row(), fc = score_frag_col(f);
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      mma<E, Rows, Cols, kHp>(acc, Ks + fr * kFrag * ldh, ldh, Qs + fc * kFrag * ldh, ldh);
      wmma::store_matrix_sync(Ss + fr * kFrag * lds + fc * kFrag, acc, lds, wmma::mem_row_major);
      wmma::fill_fragment(acc, 0.0f);
      mma<E, Rows, Cols, kHp>(acc, Vs + fr * kFrag * ldh, ldh, dOs + fc * kFrag * ldh, ldh);
      wmma::store_matrix_sync(dPs + fr * kFrag * lds + fc * kFrag, acc, lds, wmma::mem_row_major);
    }
    __syncthreads();

    // P^T and dS^T, rounded to S as the products take them (keys ty + 16 i, queries
    // tx + 16 j).
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        const int kr = ty + kSide * i, qc = tx + kSide * j;
        const float p = visible(q0 + qc, k0 + kr, T)
                            ? recomputed_prob(Ss[kr * lds + qc] * scale, lse_s[qc])
                            : 0.0f;
        Ps[kr * ldp + qc] = narrow_bits<S>(p);
        dSs[kr * ldp + qc] = narrow_bits<S>(score_grad(p, dPs[kr * lds + qc], d_s[qc]));
      }
    __syncthreads();

    // dV += P^T dO and dK += dS^T Q into this warp's fragments; this tile's dQ = dS K
    // (dS^T read column-major) into Rs.
#pragma unroll
    for (int n = 0; n < kMine; ++n) {
      const int f = warp + n * kWarps, fr = f / (kHp / kFrag), fc = f % (kHp / kFrag);
      if (f >= kAccFrags) break;
      mma<E, Rows, Rows, kTile>(dv[n], Ps + fr * kFrag * ldp, ldp, dOs + fc * kFrag, ldh);
      mma<E, Rows, Rows, kTile>(dk[n], dSs + fr * kFrag * ldp, ldp, Qs + fc * kFrag, ldh);
      FragC dq;
      wmma::fill_fragment(dq, 0.0f);
      mma<E, Cols, Rows, kTile>(dq, dSs + fr * kFrag, ldp, Ks + fc * kFrag, ldh);
      wmma::store_matrix_sync(Rs + fr * kFrag * ldo + fc * kFrag, dq, ldo, wmma::mem_row_major);
    }
    __syncthreads();
    add_tile<kHp, ldo>(dqkv, Rs, scale, 0, b, h, q0, T, C, hs, true);
  }

  // dK and dV, one after the other through Rs, into dqkv (+=; this block owns the keys).
#pragma unroll
  for (int part = 1; part <= 2; ++part) {
    __syncthreads();  // the last reads of Rs are done
#pragma unroll
    for (int n = 0; n < kMine; ++n) {
      const int f = warp + n * kWarps, fr = f / (kHp / kFrag), fc = f % (kHp / kFrag);
      if (f >= kAccFrags) break;
      wmma::store_matrix_sync(Rs + fr * kFrag * ldo + fc * kFrag, part == 1 ? dk[n] : dv[n], ldo,
                              wmma::mem_row_major);
    }
    __syncthreads();
    add_tile<kHp, ldo>(dqkv, Rs, part == 1 ? scale : 1.0f, part, b, h, k0, T, C, hs, false);
  }
}

// --- launchers ------------------------------------------------------------------------

float softmax_scale(int hs) { return 1.0f / std::sqrt(float(hs)); }

// Opts the kernel in to SMEM bytes of dynamic shared memory and launches it on (grid, 256).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

template <typename S, int kHp>
void launch_forward(FlashKernel kernel, void* out, float* lse, const void* qkv, int B, int T,
                    int NH, int hs, cudaStream_t stream) {
  const dim3 grid(unsigned(B * NH), unsigned(num_blocks(T, kBlockQ)));
  const float scale = softmax_scale(hs);
  if constexpr (!std::is_same_v<S, float>) {
    if (kernel == FlashKernel::tensor_core) {
      launch(tc_forward_kernel<S, kHp>, grid, tc_forward_smem_bytes(kHp), stream,
             static_cast<S*>(out), lse, static_cast<const S*>(qkv), T, NH, hs, scale);
      return;
    }
  }
  launch(simt_forward_kernel<S, kHp>, grid, simt_forward_smem_bytes(kHp), stream,
         static_cast<S*>(out), lse, static_cast<const S*>(qkv), T, NH, hs, scale);
}

template <typename S, int kHp>
void launch_backward(FlashKernel kernel, float* dqkv, const float* dout, const void* qkv,
                     const void* out, const float* lse, float* dsum, int B, int T, int NH, int hs,
                     cudaStream_t stream) {
  const bool tc = kernel == FlashKernel::tensor_core;
  const int rows = B * NH * T, warps = kThreads / 32;
  const unsigned dsum_grid = unsigned((rows + warps - 1) / warps);
  if (tc)
    backward_dsum_kernel<S, true><<<dsum_grid, kThreads, 0, stream>>>(
        dsum, dout, static_cast<const S*>(out), T, NH, hs, rows);
  else
    backward_dsum_kernel<S, false><<<dsum_grid, kThreads, 0, stream>>>(
        dsum, dout, static_cast<const S*>(out), T, NH, hs, rows);
  CUDA_CHECK(cudaGetLastError());
  const dim3 grid(unsigned(B * NH), unsigned(num_blocks(T, kBlockK)));
  const float scale = softmax_scale(hs);
  if constexpr (!std::is_same_v<S, float>) {
    if (tc) {
      launch(tc_backward_kernel<S, kHp>, grid, tc_backward_smem_bytes(kHp), stream, dqkv, dout,
             static_cast<const S*>(qkv), lse, static_cast<const float*>(dsum), T, NH, hs, scale);
      return;
    }
  }
  launch(simt_backward_kernel<S, kHp>, grid, simt_backward_smem_bytes(kHp), stream, dqkv, dout,
         static_cast<const S*>(qkv), lse, static_cast<const float*>(dsum), T, NH, hs, scale);
}

// Checks the arguments and calls FN.template operator()<S, kHp>() for storage DT and the
// padded head size of C / NH, passing the head size.
template <typename Fn>
void dispatch(const char* fn_name, DType dt, FlashKernel kernel, int C, int NH, Fn&& fn) {
  const int hs = head_size(fn_name, C, NH);
  if (dt != DType::f32 && dt != DType::bf16 && dt != DType::f16)
    throw std::invalid_argument(std::string(fn_name) +
                                ": storage must be fp32, bf16 or fp16, got " + dtype_name(dt));
  if (kernel == FlashKernel::tensor_core && dt == DType::f32)
    throw std::invalid_argument(std::string(fn_name) +
                                ": the tensor-core kernel takes bf16 or fp16 storage, not fp32");
  auto with_head = [&]<typename S>() {
    switch (padded_head_size(hs)) {
      case 16:
        return fn.template operator()<S, 16>(hs);
      case 32:
        return fn.template operator()<S, 32>(hs);
      case 64:
        return fn.template operator()<S, 64>(hs);
      default:
        return fn.template operator()<S, 128>(hs);
    }
  };
  kernels::with_storage(dt, with_head);
}

}  // namespace

void flash_attention_forward(FlashKernel kernel, DType dt, void* out, float* lse, const void* qkv,
                             int B, int T, int C, int NH, cudaStream_t stream) {
  dispatch("flash_attention_forward", dt, kernel, C, NH, [&]<typename S, int kHp>(int hs) {
    if (B * T > 0) launch_forward<S, kHp>(kernel, out, lse, qkv, B, T, NH, hs, stream);
  });
}

void flash_attention_backward(FlashKernel kernel, DType dt, float* dqkv, const float* dout,
                              const void* qkv, const void* out, const float* lse, float* dsum,
                              int B, int T, int C, int NH, cudaStream_t stream) {
  dispatch("flash_attention_backward", dt, kernel, C, NH, [&]<typename S, int kHp>(int hs) {
    if (B * T > 0)
      launch_backward<S, kHp>(kernel, dqkv, dout, qkv, out, lse, dsum, B, T, NH, hs, stream);
  });
}

}  // namespace ringstep::cuda
