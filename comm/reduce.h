// The reduction kernels shared by the ring and by the native fp16/bf16 MPI_Op, so that both
// round identically. Arithmetic is in fp32; fp16/bf16 results are rounded back to nearest
// even once per call, i.e. once per ring hop.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace ringstep {

// inout[i] = (inout[i] + in[i]) / divisor.
void reduce_sum(void* inout, const void* in, size_t count, DType dt, float divisor = 1.0f);
// buf[i] = buf[i] / divisor (the averaging of a native AllReduce).
void divide_by(void* buf, size_t count, DType dt, float divisor);

}  // namespace ringstep
