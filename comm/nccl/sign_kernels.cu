#include "comm/nccl/sign_kernels.h"

#include <algorithm>

#include "comm/sign_allreduce.h"  // kScaleRun
#include "comm/sign_code.h"
#include "core/cuda/cuda_check.h"

namespace ringstep::nccl {
namespace {

namespace sc = sign_code;

constexpr int kBlock = 256;
constexpr unsigned kFullWarp = 0xffffffffu;

unsigned grid_for(size_t threads) {
  return unsigned(std::min<size_t>((threads + kBlock - 1) / kBlock, size_t(1) << 16));
}

__global__ void add_error_kernel(const float* x, float* error, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    error[i] = x[i] + error[i];
}

// Block r sums run r with kLanes threads (the rest of the block idles), lanes combined in
// order by thread 0.
__global__ void run_sums_kernel(const float* z, size_t n, bool mean_abs, double* run_sums) {
  __shared__ double lanes[sc::kLanes];
  const size_t begin = size_t(blockIdx.x) * kScaleRun;
  const size_t len = n - begin < kScaleRun ? n - begin : kScaleRun;
  const int lane = int(threadIdx.x);
  if (lane < sc::kLanes) lanes[lane] = sc::lane_sum(z + begin, len, mean_abs, lane);
  __syncthreads();
  if (lane == 0) run_sums[blockIdx.x] = sc::combine_run(lanes, z + begin, len, mean_abs);
}

__global__ void scale_kernel(const double* run_sums, size_t runs, size_t n, bool mean_abs,
                             float* scale) {
  double sum = 0;
  for (size_t r = 0; r < runs; ++r) sum += run_sums[r];
  *scale = sc::scale_from_sum(sum, n, mean_abs);
}

// Each warp codes 32 consecutive elements: one ballot of their bits, lanes 0..3 write its
// bytes, every lane its element's new error. Whole warps run (lanes past N hold +0, whose
// bit is 0), so the ballot's mask is the full warp.
__global__ void code_kernel(float* z, size_t n, const float* scale, uint8_t* bits) {
  const float s = *scale;
  const size_t bytes = (n + 7) / 8;
  const size_t warps = (n + 31) / 32;
  const int lane = int(threadIdx.x % 32);
  for (size_t w = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32; w < warps;
       w += size_t(gridDim.x) * blockDim.x / 32) {
    const size_t i = w * 32 + size_t(lane);
    const float v = i < n ? z[i] : 0.0f;
    const uint32_t word = __ballot_sync(kFullWarp, sc::negative(v) != 0);
    if (lane < 4 && w * 4 + size_t(lane) < bytes)
      bits[w * 4 + size_t(lane)] = sc::ballot_byte(word, lane);
    if (i < n) z[i] = sc::error_after(v, s);
  }
}

}  // namespace

void launch_add_error(const float* x, float* error, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_error_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, error, n);
  CUDA_CHECK(cudaGetLastError());
}

void launch_scale(const float* z, size_t n, bool mean_abs, double* run_sums, float* scale,
                  cudaStream_t stream) {
  const size_t runs = (n + kScaleRun - 1) / kScaleRun;
  if (runs > 0) {
    run_sums_kernel<<<unsigned(runs), 32, 0, stream>>>(z, n, mean_abs, run_sums);
    CUDA_CHECK(cudaGetLastError());
  }
  scale_kernel<<<1, 1, 0, stream>>>(run_sums, runs, n, mean_abs, scale);
  CUDA_CHECK(cudaGetLastError());
}

void launch_code(float* z, size_t n, const float* scale, uint8_t* bits, cudaStream_t stream) {
  if (n == 0) return;
  code_kernel<<<grid_for((n + 31) / 32 * 32), kBlock, 0, stream>>>(z, n, scale, bits);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ringstep::nccl
