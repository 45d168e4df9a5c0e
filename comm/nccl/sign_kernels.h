// 1-bit Adam's sign code on the GPU (issue 36, not yet wired into the trainer): the worker
// stage's kernels over one segment of a device vector, with the per-element math of
// comm/sign_code.h, so that they give comm/sign_allreduce.h's bits (same signs, same
// scales, same errors). Enqueued on STREAM; every launch checked.
//   launch_add_error:  z[i] = x[i] + error[i], into ERROR (z is formed in place);
//   launch_scale:      the fp32 scale of z[0, n) into *SCALE (device memory), summed in the
//                      code's fixed order: one 16-thread group per run of kScaleRun
//                      elements (lane l its elements l, l + 16, ...), its lanes combined in
//                      order, then one thread adds the runs in order;
//   launch_code:       the packed bits of z[0, n) (a warp's __ballot_sync gives 32 bits,
//                      its lanes 0..3 write the 4 bytes; ceil(n / 8) bytes, the last one's
//                      unused high bits 0) and z[i] -= scale sign(z[i]): the new error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ringstep::nccl {

void launch_add_error(const float* x, float* error, size_t n, cudaStream_t stream);
// RUN_SUMS: device scratch of ceil(n / kScaleRun) doubles.
void launch_scale(const float* z, size_t n, bool mean_abs, double* run_sums, float* scale,
                  cudaStream_t stream);
void launch_code(float* z, size_t n, const float* scale, uint8_t* bits, cudaStream_t stream);

}  // namespace ringstep::nccl
