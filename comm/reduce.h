// The reduction kernels shared by the ring and by the native fp16/bf16 MPI_Ops, so that both
// round identically. Arithmetic is in fp32; fp16/bf16 results are rounded back to nearest
// even once per call, i.e. once per ring hop. max and min are exact in every dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace ringstep {

// The element-wise reduction of a collective. max and min are commutative to the bit, so
// that two ranks combining each other's values get the same bits: +0 counts as larger than
// -0, and a NaN in either operand gives a NaN (as a sum would).
enum class ReduceOp : uint8_t { sum, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum" | "max" | "min"

// inout[i] = (inout[i] + in[i]) / divisor.
void reduce_sum(void* inout, const void* in, size_t count, DType dt, float divisor = 1.0f);
// inout[i] = op(inout[i], in[i]), then / divisor; a divisor other than 1 (averaging) only
// with sum.
void reduce(ReduceOp op, void* inout, const void* in, size_t count, DType dt, float divisor = 1.0f);
// buf[i] = buf[i] / divisor (the averaging of a native AllReduce).
void divide_by(void* buf, size_t count, DType dt, float divisor);

}  // namespace ringstep
