// Causal multi-head self-attention with 16-bit storage, the twin of attention_forward /
// attention_backward (core/cpu/ops.h) for precision.dtype bf16 | fp16: the same layout,
// masking and query blocking, but q, k, v, P and out are stored in 16 bits and every
// product runs on gemm16 (16-bit inputs, fp32 accumulation; bf16 on AMX or AVX512-BF16). Softmax
// and its backward run in fp32. Thread-safe; parallel over (batch, head) pairs with OpenMP, and the
// result does not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ringstep::cpu {

// DT is DType::bf16 or DType::f16 (std::invalid_argument otherwise, or when NH does not
// divide C). qkv[B,T,3C] (16-bit) holds q | k | v; head h uses channels [h*hs, (h+1)*hs)
// of each, hs = C/NH. att[B,NH,T,T] receives softmax(q k^T / sqrt(hs)) with the causal
// mask, rounded to DT (exact zeros above the diagonal). out[B,T,C] = P v rounded to DT,
// computed with the rounded P, so backward's P is forward's P.
void attention_forward16(DType dt, uint16_t* out, uint16_t* att, const uint16_t* qkv, int B, int T,
                         int C, int NH);
// dqkv[B,T,3C] (fp32) += the gradient through the op; att is forward's. dout[B,T,C] is
// fp32 and is rounded to DT where it enters a product (as activation gradients are on a
// GPU); so is the softmax gradient dS.
void attention_backward16(DType dt, float* dqkv, const float* dout, const uint16_t* qkv,
                          const uint16_t* att, int B, int T, int C, int NH);

}  // namespace ringstep::cpu
