// Kernels in the style of llm.c: elementwise ops use a grid-stride loop, LayerNorm gives
// one warp to each row. Arithmetic is fp32 without fast-math so results stay within a few
// ulp of the CPU ops.
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_common.cuh"
#include "core/cuda/ops_cuda.h"

namespace ringstep::cuda {
namespace {

constexpr int kBlock = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kLayerNormEps = 1e-5f;

unsigned grid_for(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kBlock - 1) / kBlock, 1u << 16));
}

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    // d/dx tanh(u) = 1 - tanh(u)^2; unlike 1/cosh^2 it cannot overflow for large |x|.
    const float local_grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluScale *
                                                     (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += local_grad * dout[i];
  }
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;  // whole warps leave together, so the shuffles stay converged
  const float* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += x[c];
  const float m = warp_sum(sum) / C;
  // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - E[x]^2.
  float sq = 0.0f;
  for (int c = lane; c < C; c += 32) sq += (x[c] - m) * (x[c] - m);
  const float s = 1.0f / sqrtf(warp_sum(sq) / C + kLayerNormEps);
  float* y = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void mask_columns_kernel(float* x, int N, int V, int from) {
  const size_t width = size_t(V - from), n = size_t(N) * width;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i / width * V + from + i % width] = -INFINITY;
}

// The roundings of core/dtype.cpp, bit for bit (kernels::narrow).
__global__ void fp32_to_fp16_kernel(const float* in, uint16_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = kernels::narrow<kernels::Fp16>(in[i]).bits;
}

__global__ void fp32_to_bf16_kernel(const float* in, uint16_t* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = kernels::narrow<uint16_t>(in[i]);
}

// Owns one device allocation; frees it even when a later check throws.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)));
  }
  DeviceArray(const T* host, size_t n) : DeviceArray(n) {
    CUDA_CHECK(cudaMemcpy(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  void copy_to(T* host) const {
    CUDA_CHECK(cudaMemcpy(host, ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(out, inp, n);
  CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dinp, inp, dout, n);
  CUDA_CHECK(cudaGetLastError());
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  constexpr int kRowsPerBlock = kBlock / 32;
  const unsigned grid = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_forward_kernel<<<grid, kBlock, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  CUDA_CHECK(cudaGetLastError());
}

void mask_columns(float* x, int N, int V, int from, cudaStream_t stream) {
  if (N <= 0 || from >= V) return;
  mask_columns_kernel<<<grid_for(size_t(N) * size_t(V - from)), kBlock, 0, stream>>>(x, N, V, from);
  CUDA_CHECK(cudaGetLastError());
}

void fp32_to_fp16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  fp32_to_fp16_kernel<<<grid_for(n), kBlock, 0, stream>>>(in, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void fp32_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  fp32_to_bf16_kernel<<<grid_for(n), kBlock, 0, stream>>>(in, out, n);
  CUDA_CHECK(cudaGetLastError());
}

// The host wrappers use the default stream; the blocking copy back synchronises.
void gelu_forward_host(float* out, const float* inp, size_t n) {
  DeviceArray<float> d_inp(inp, n), d_out(n);
  gelu_forward(d_out.get(), d_inp.get(), n);
  d_out.copy_to(out);
}

void gelu_backward_host(float* dinp, const float* inp, const float* dout, size_t n) {
  DeviceArray<float> d_dinp(dinp, n), d_inp(inp, n), d_dout(dout, n);
  gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n);
  d_dinp.copy_to(dinp);
}

void layernorm_forward_host(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
  const size_t rows = static_cast<size_t>(N), numel = rows * static_cast<size_t>(C);
  DeviceArray<float> d_inp(inp, numel), d_weight(weight, C), d_bias(bias, C);
  DeviceArray<float> d_out(numel), d_mean(rows), d_rstd(rows);
  layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(),
                    d_bias.get(), N, C);
  d_out.copy_to(out);
  d_mean.copy_to(mean);
  d_rstd.copy_to(rstd);
}

void fp32_to_fp16_host(const float* in, uint16_t* out, size_t n) {
  DeviceArray<float> d_in(in, n);
  DeviceArray<uint16_t> d_out(n);
  fp32_to_fp16(d_in.get(), d_out.get(), n);
  d_out.copy_to(out);
}

void fp32_to_bf16_host(const float* in, uint16_t* out, size_t n) {
  DeviceArray<float> d_in(in, n);
  DeviceArray<uint16_t> d_out(n);
  fp32_to_bf16(d_in.get(), d_out.get(), n);
  d_out.copy_to(out);
}

}  // namespace ringstep::cuda
