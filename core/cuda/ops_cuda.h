// CUDA twins of the CPU ops (core/cpu/ops.h) and of the dtype conversions (core/dtype.h),
// same math, same shapes, backward adding into its output. The launchers take device
// pointers and run asynchronously on `stream`; the *_host wrappers copy host arrays in,
// launch, copy out and synchronise, for tests. Failures throw (see cuda_check.h).
// Declared only in builds with the CUDA backend (RINGSTEP_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(RINGSTEP_HAVE_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>

namespace ringstep::cuda {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream = nullptr);
// dinp += gelu'(inp) * dout
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream = nullptr);
// out[N,C] = (inp - mean) * rstd * weight + bias per row, eps 1e-5, population variance;
// mean[N] and rstd[N] are saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream = nullptr);
// x[n, c] = -inf for every row n < N and column FROM <= c < V of the row-major (N, V) X:
// the vocabulary's padded logits, out of the softmax.
void mask_columns(float* x, int N, int V, int from, cudaStream_t stream = nullptr);
// Round to nearest even, inf/NaN kept; bit-identical to the CPU conversions.
void fp32_to_fp16(const float* in, uint16_t* out, size_t n, cudaStream_t stream = nullptr);
void fp32_to_bf16(const float* in, uint16_t* out, size_t n, cudaStream_t stream = nullptr);

void gelu_forward_host(float* out, const float* inp, size_t n);
void gelu_backward_host(float* dinp, const float* inp, const float* dout, size_t n);
void layernorm_forward_host(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C);
void fp32_to_fp16_host(const float* in, uint16_t* out, size_t n);
void fp32_to_bf16_host(const float* in, uint16_t* out, size_t n);

}  // namespace ringstep::cuda

#endif
