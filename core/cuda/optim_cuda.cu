#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "core/cuda/optim_cuda.h"

namespace ringstep::cuda {
namespace {

constexpr int kBlock = 256;

unsigned grid_for(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kBlock - 1) / kBlock, size_t(1) << 16));
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n,
                             AdamWStep s, float decay) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], g[i], m[i], v[i], s, decay);
}

__global__ void onebit_momentum_kernel(float* m, const float* g, size_t n, float beta1,
                                       float grad_scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    m[i] = onebit_local_momentum(m[i], g[i], beta1, grad_scale);
}

__global__ void onebit_update_kernel(float* p, float* m, const float* v, float* ew, float* es,
                                     size_t n, OneBitStep s, float decay) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    onebit_param_element(p[i], m[i], v[i], s, decay);
    if (!onebit_live(v[i])) m[i] = ew[i] = es[i] = 0.0f;
  }
}

__global__ void adamw_if_applied_kernel(float* p, const float* g, float* m, float* v, size_t n,
                                        const DeferredStep* step, bool decays) {
  if (!step->applied) return;
  const AdamWStep s = step->adam;
  const float decay = decays ? step->decay : 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], g[i], m[i], v[i], s, decay);
}

// isfinite on the device is exact (no fast-math here); one flag write per block that saw a
// bad element. INV: the unscaling factor, or null to read it from CARRY.
template <typename Flag>
__global__ void unscale_check_kernel(float* g, size_t n, float inv_arg, const StepCarry* carry,
                                     Flag* flag) {
  const float inv = carry ? static_cast<float>(1.0 / carry->scaler.scale) : inv_arg;
  bool bad = false;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float x = inv == 1.0f ? g[i] : g[i] * inv;
    if (inv != 1.0f) g[i] = x;
    bad |= !isfinite(x);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

// The sum of V over the block's threads, in thread 0 (a tree in shared memory; kBlock is a
// power of two).
__device__ double block_sum(double v) {
  __shared__ double part[kBlock];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

__global__ void sum_squares_kernel(const float* x, size_t n, double* partials) {
  double acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * double(x[i]);
  const double sum = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void fold_kernel(const double* partials, int count, double* out) {
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double sum = block_sum(acc);
  if (threadIdx.x == 0) *out = sum;
}

__global__ void decide_kernel(StepRule rule, StepCarry* carry, DeferredStep* step) {
  decide_step(rule, *carry, *step);
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWStep& step, float decay) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kBlock>>>(params, grads, m, v, n, step, decay);
  CUDA_CHECK(cudaGetLastError());
}

bool unscale_and_check(float* grads, size_t n, float inv_scale, int* flag) {
  CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int)));
  if (n > 0) {
    unscale_check_kernel<<<grid_for(n), kBlock>>>(grads, n, inv_scale, nullptr, flag);
    CUDA_CHECK(cudaGetLastError());
  }
  int host = 0;
  CUDA_CHECK(cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost));
  return host != 0;
}

double sum_squares(const float* x, size_t n, double* partials) {
  sum_squares_into(x, n, partials, partials + kNormBlocks);
  double host = 0;
  CUDA_CHECK(cudaMemcpy(&host, partials + kNormBlocks, sizeof(double), cudaMemcpyDeviceToHost));
  return host;
}

void unscale_and_flag(float* grads, size_t n, const StepCarry* carry, DeferredStep* step) {
  if (n == 0) return;
  unscale_check_kernel<<<grid_for(n), kBlock>>>(grads, n, 1.0f, carry, &step->bad);
  CUDA_CHECK(cudaGetLastError());
}

void sum_squares_into(const float* x, size_t n, double* partials, double* out) {
  sum_squares_kernel<<<kNormBlocks, kBlock>>>(x, n, partials);
  CUDA_CHECK(cudaGetLastError());
  fold_kernel<<<1, kBlock>>>(partials, kNormBlocks, out);
  CUDA_CHECK(cudaGetLastError());
}

void decide(const StepRule& rule, StepCarry* carry, DeferredStep* step) {
  decide_kernel<<<1, 1>>>(rule, carry, step);
  CUDA_CHECK(cudaGetLastError());
}

void adamw_update_if_applied(float* params, const float* grads, float* m, float* v, size_t n,
                             const DeferredStep* step, bool decays) {
  if (n == 0) return;
  adamw_if_applied_kernel<<<grid_for(n), kBlock>>>(params, grads, m, v, n, step, decays);
  CUDA_CHECK(cudaGetLastError());
}

void onebit_momentum(float* m, const float* grads, size_t n, float beta1, float grad_scale) {
  if (n == 0) return;
  onebit_momentum_kernel<<<grid_for(n), kBlock>>>(m, grads, n, beta1, grad_scale);
  CUDA_CHECK(cudaGetLastError());
}

void onebit_update(float* params, float* m, const float* v, float* worker_error,
                   float* server_error, size_t n, const OneBitStep& step, float decay) {
  if (n == 0) return;
  onebit_update_kernel<<<grid_for(n), kBlock>>>(params, m, v, worker_error, server_error, n, step,
                                                decay);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ringstep::cuda
