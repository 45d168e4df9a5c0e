// The device ring's reduction (comm/nccl/nccl_comm.h): inout[i] = (inout[i] + in[i]) /
// divisor in fp32, stored back as DT with core/dtype.h's rounding, exactly as
// comm/reduce.h's reduce_sum does on the host. Enqueued on STREAM; checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace ringstep::nccl {

void launch_reduce_sum(void* inout, const void* in, size_t n, DType dt, float divisor,
                       cudaStream_t stream);

}  // namespace ringstep::nccl
