#include "comm/nccl/nccl_reduce.h"

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernel_common.cuh"

namespace ringstep::nccl {
namespace {

namespace k = cuda::kernels;

// inout[i] = (inout[i] + in[i]) / divisor in fp32, stored as S: comm/reduce.h's reduce_sum.
template <typename S>
__global__ void reduce_sum_kernel(S* inout, const S* in, size_t n, float divisor) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    inout[i] = k::narrow<S>((k::widen(inout[i]) + k::widen(in[i])) / divisor);
}

}  // namespace

void launch_reduce_sum(void* inout, const void* in, size_t n, DType dt, float divisor,
                       cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  const unsigned grid = unsigned(std::min<size_t>((n + kBlock - 1) / kBlock, size_t(1) << 16));
  k::with_storage(dt, [&]<typename S>() {
    reduce_sum_kernel<<<grid, kBlock, 0, stream>>>(static_cast<S*>(inout),
                                                    static_cast<const S*>(in), n, divisor);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ringstep::nccl
