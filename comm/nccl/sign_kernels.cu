#include <cuda_runtime_api.h>

#include <algorithm>

#include "comm/nccl/sign_kernels.h"
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
cudaStream_t cuda_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

__device__ size_t thread_index() { return blockIdx.x * size_t(blockDim.x) + threadIdx.x; }
__device__ size_t thread_count() { return size_t(gridDim.x) * blockDim.x; }

__global__ void add_error_kernel(const float* x, float* e, size_t n) {
  for (size_t i = thread_index(); i < n; i += thread_count()) e[i] = x[i] + e[i];
}

// Block q sums run q with kLanes threads (the rest of the block idles), lanes combined in
// order by thread 0.
__global__ void run_sums_kernel(const float* z, SignRuns r, bool mean_abs, double* run_sums) {
  __shared__ double lanes[sc::kLanes];
  const float* run = z + r.runs[2 * blockIdx.x];
  const size_t len = r.runs[2 * blockIdx.x + 1] - r.runs[2 * blockIdx.x];
  const int lane = int(threadIdx.x);
  if (lane < sc::kLanes) lanes[lane] = sc::lane_sum(run, len, mean_abs, lane);
  __syncthreads();
  if (lane == 0) run_sums[blockIdx.x] = sc::combine_run(lanes, run, len, mean_abs);
}

__global__ void part_scales_kernel(const double* run_sums, SignRuns r, bool mean_abs,
                                   float* scales) {
  for (size_t p = thread_index(); p < r.parts; p += thread_count())
    scales[p] = sc::part_scale(run_sums, r, p, mean_abs);
}

__global__ void place_scales_kernel(const float* scales, const size_t* placements, size_t n,
                                    uint8_t* msgs) {
  for (size_t i = thread_index(); i < n; i += thread_count())
    sc::store_scale(msgs + placements[2 * i + 1], scales[placements[2 * i]]);
}

// Warp w codes elements 32 v .. 32 v + 31 of chunk j0 + w / warps_per_chunk (v = w mod
// warps_per_chunk). Whole warps run the ballot (lanes past the chunk or the count hold +0,
// whose bit is 0), so its mask is the full warp.
__global__ void code_kernel(float* z, SignTables t, int j0, int j1, const float* scales,
                            size_t segment_base, uint8_t* msgs) {
  const size_t per_chunk = (t.chunk + 31) / 32, chunk_bytes = t.chunk / 8;
  const size_t warps = size_t(j1 - j0) * per_chunk;
  const int lane = int(threadIdx.x % 32);
  for (size_t w = thread_index() / 32; w < warps; w += thread_count() / 32) {
    const int j = j0 + int(w / per_chunk);
    const size_t v = w % per_chunk, local = v * 32 + size_t(lane);
    const size_t i = size_t(j) * t.chunk + local;
    const bool real = local < t.chunk && i < t.count;
    const float value = real ? z[i] : 0.0f;
    const uint32_t word = __ballot_sync(kFullWarp, sc::negative(value) != 0);
    if (lane < 4 && v * 4 + size_t(lane) < chunk_bytes)
      msgs[size_t(j) * t.block_bytes + t.scale_bytes + v * 4 + size_t(lane)] =
          sc::ballot_byte(word, lane);
    if (real)
      z[i] = sc::error_after(value, scales[sc::segment_of(t.ends, t.segments, i) - segment_base]);
  }
}

__global__ void server_sum_kernel(const uint8_t* in, const uint8_t* own, SignTables t, int r,
                                  size_t begin, size_t n, float* e) {
  for (size_t k = thread_index(); k < n; k += thread_count()) {
    const size_t i = begin + k;
    e[i] = sc::server_element(in, own, t, r, i, e[i]);
  }
}

__global__ void decode_kernel(const uint8_t* gathered, SignTables t, float* x) {
  for (size_t i = thread_index(); i < t.count; i += thread_count())
    x[i] = sc::decode_element(gathered, t, i);
}

}  // namespace

void CudaSignKernels::zero(void* p, size_t bytes, StreamHandle stream) {
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(stream)));
}

void CudaSignKernels::add_error(const float* x, float* e, size_t n, StreamHandle stream) {
  if (n == 0) return;
  add_error_kernel<<<grid_for(n), kBlock, 0, cuda_stream(stream)>>>(x, e, n);
  CUDA_CHECK(cudaGetLastError());
}

void CudaSignKernels::scales(const float* z, const SignRuns& r, bool mean_abs, double* run_sums,
                             float* scales, StreamHandle stream) {
  if (r.nruns > 0) {
    run_sums_kernel<<<unsigned(r.nruns), 32, 0, cuda_stream(stream)>>>(z, r, mean_abs, run_sums);
    CUDA_CHECK(cudaGetLastError());
  }
  if (r.parts == 0) return;
  part_scales_kernel<<<grid_for(r.parts), kBlock, 0, cuda_stream(stream)>>>(run_sums, r, mean_abs,
                                                                            scales);
  CUDA_CHECK(cudaGetLastError());
}

void CudaSignKernels::place_scales(const float* scales, const size_t* placements, size_t n,
                                   uint8_t* msgs, StreamHandle stream) {
  if (n == 0) return;
  place_scales_kernel<<<grid_for(n), kBlock, 0, cuda_stream(stream)>>>(scales, placements, n, msgs);
  CUDA_CHECK(cudaGetLastError());
}

void CudaSignKernels::code(float* z, const SignTables& t, int j0, int j1, const float* scales,
                           size_t segment_base, uint8_t* msgs, StreamHandle stream) {
  const size_t lanes = size_t(j1 - j0) * ((t.chunk + 31) / 32) * 32;
  if (lanes == 0) return;
  code_kernel<<<grid_for(lanes), kBlock, 0, cuda_stream(stream)>>>(z, t, j0, j1, scales,
                                                                   segment_base, msgs);
  CUDA_CHECK(cudaGetLastError());
}

void CudaSignKernels::server_sum(const uint8_t* in, const uint8_t* own, const SignTables& t, int r,
                                 float* e, StreamHandle stream) {
  const size_t begin = std::min(t.count, size_t(r) * t.chunk);
  const size_t n = std::min(t.count, begin + t.chunk) - begin;
  if (n == 0) return;
  server_sum_kernel<<<grid_for(n), kBlock, 0, cuda_stream(stream)>>>(in, own, t, r, begin, n, e);
  CUDA_CHECK(cudaGetLastError());
}

void CudaSignKernels::decode(const uint8_t* gathered, const SignTables& t, float* x,
                             StreamHandle stream) {
  if (t.count == 0) return;
  decode_kernel<<<grid_for(t.count), kBlock, 0, cuda_stream(stream)>>>(gathered, t, x);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ringstep::nccl
