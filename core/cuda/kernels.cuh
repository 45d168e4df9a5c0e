// The CUDA backend's kernels (include only from core/cuda/*.cu). S is the storage type of
// "stored" tensors: float, or uint16_t holding bf16 bits. Arithmetic is fp32 without
// fast-math; narrow<S> rounds exactly as core/dtype.h does. Elementwise kernels use a
// grid-stride loop over n; row kernels give one warp to a row (rows = blockIdx.x *
// warps-per-block + warp) and return whole warps only, so shuffles stay converged.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cuda/kernel_common.cuh"

namespace ringstep::cuda::kernels {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kLayerNormEps = 1e-5f;

#define RINGSTEP_GRID_STRIDE(i, n)                                                  \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

template <typename S>
__global__ void narrow_kernel(S* out, const float* in, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) out[i] = narrow<S>(in[i]);
}

// out[n, c] = wte[tokens[n], c] + wpe[n % T, c]
template <typename S>
__global__ void encoder_forward_kernel(S* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int T, int C, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) {
    const size_t row = i / C, c = i % C;
    out[i] = narrow<S>(wte[size_t(tokens[row]) * C + c] + wpe[(row % T) * C + c]);
  }
}

// dwte[tokens[n], c] += dout[n, c] (atomics: tokens repeat).
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                            int C, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) atomicAdd(&dwte[size_t(tokens[i / C]) * C + i % C], dout[i]);
}

// dwpe[t, c] += sum_b dout[b, t, c], n = T C; each element owned by one thread.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C,
                                            size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += dout[size_t(b) * T * C + i];
    dwpe[i] += s;
  }
}

template <typename S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp,
                                         const float* weight, const float* bias, int N, int C) {
  const int lane = threadIdx.x % 32, row = warp_row();
  if (row >= N) return;
  const S* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += widen(x[c]);
  const float m = warp_sum(sum) / C;
  float sq = 0.0f;  // two passes: no cancellation in E[x^2] - E[x]^2
  for (int c = lane; c < C; c += 32) sq += (widen(x[c]) - m) * (widen(x[c]) - m);
  const float s = 1.0f / sqrtf(warp_sum(sq) / C + kLayerNormEps);
  S* y = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = narrow<S>((widen(x[c]) - m) * s * weight[c] + bias[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight, xhat = (x - mean) rstd.
template <typename S>
__global__ void layernorm_backward_dinp_kernel(float* dinp, const float* dout, const S* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32, row = warp_row();
  if (row >= N) return;
  const size_t at = size_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float g = dout[at + c] * weight[c];
    g_sum += g;
    gx_sum += g * (widen(inp[at + c]) - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (widen(inp[at + c]) - m) * s;
    dinp[at + c] += (dout[at + c] * weight[c] - g_mean - xhat * gx_mean) * s;
  }
}

// Column sums over row chunks: block (32, 8) covers columns [32 bx, 32 bx + 32) of rows
// [by ROWS, (by + 1) ROWS); each block adds its partial sums with one atomic per column.
// dw[c] += sum dout[r, c] xhat[r, c] when INP is not null; db[c] += sum dout[r, c].
template <typename S>
__global__ void column_sums_kernel(float* dw, float* db, const float* dout, const S* inp,
                                   const float* mean, const float* rstd, int N, int C, int rows) {
  __shared__ float part_w[8][33], part_b[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int r = r0 + ty; r < r1; r += 8) {
      const float dy = dout[size_t(r) * C + c];
      sb += dy;
      if (inp != nullptr) sw += dy * (widen(inp[size_t(r) * C + c]) - mean[r]) * rstd[r];
    }
  }
  part_w[ty][tx] = sw;
  part_b[ty][tx] = sb;
  __syncthreads();
  if (ty != 0 || c >= C) return;
  for (int k = 1; k < 8; ++k) {
    sw += part_w[k][tx];
    sb += part_b[k][tx];
  }
  if (inp != nullptr) atomicAdd(&dw[c], sw);
  atomicAdd(&db[c], sb);
}

// out[n, o] = y[n, o] (+ bias[o]) (+ residual[n, o]); OUT may be Y (fp32 storage).
template <typename S>
__global__ void bias_residual_kernel(S* out, const float* y, const float* bias, const S* residual,
                                     int OC, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) {
    float v = y[i];
    if (bias != nullptr) v += bias[i % OC];
    if (residual != nullptr) v += widen(residual[i]);
    out[i] = narrow<S>(v);
  }
}

__device__ __forceinline__ float gelu_tanh(float x) {
  return tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
}

template <typename S>
__global__ void gelu_forward_kernel(S* out, const S* inp, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) {
    const float x = widen(inp[i]);
    out[i] = narrow<S>(0.5f * x * (1.0f + gelu_tanh(x)));
  }
}

// d *= gelu'(inp), in place.
template <typename S>
__global__ void gelu_backward_kernel(float* d, const S* inp, size_t n) {
  RINGSTEP_GRID_STRIDE(i, n) {
    const float x = widen(inp[i]), t = gelu_tanh(x);
    d[i] *= 0.5f * (1.0f + t) +
            0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  }
}

// One block per row: probs = softmax(logits), loss = log(sum) + max - logits[target]
// (the CPU's logsumexp form). blockDim.x is a multiple of 32, at most 1024.
__global__ void softmax_xent_kernel(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int V) {
  __shared__ float red[32];
  const size_t at = size_t(blockIdx.x) * V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, logits[at + v]);
  mx = warp_max(mx);
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = warp_max(lane < warps ? red[lane] : -INFINITY);
  __syncthreads();  // red is reused below
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(logits[at + v] - mx);
  sum = warp_sum(sum);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = warp_sum(lane < warps ? red[lane] : 0.0f);
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) probs[at + v] = expf(logits[at + v] - mx) * inv;
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + mx - logits[at + targets[blockIdx.x]];
}

// *loss_sum += float(sum of losses[0, N) / N): the sum in double, one block of kThreads,
// fixed order (deterministic).
template <int kThreads>
__global__ void add_mean_loss_kernel(double* loss_sum, const float* losses, int N) {
  __shared__ double part[kThreads];
  double s = 0.0;
  for (int n = threadIdx.x; n < N; n += kThreads) s += losses[n];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss_sum[0] += float(part[0] / N);
}

// dlogits[n, v] = (probs[n, v] - [v == targets[n]]) (*dloss / N) (written); n = N V.
__global__ void xent_backward_kernel(float* dlogits, const float* probs, const int32_t* targets,
                                     const float* dloss, int N, int V, size_t n) {
  const float scale = *dloss / N;
  RINGSTEP_GRID_STRIDE(i, n) {
    const float onehot = int(i % V) == targets[i / V] ? 1.0f : 0.0f;
    dlogits[i] = (probs[i] - onehot) * scale;
  }
}

#undef RINGSTEP_GRID_STRIDE

}  // namespace ringstep::cuda::kernels
