// The CUDA backend (core/backend.h) for fp32, bf16 and fp16 storage, on the legacy default
// stream of the current device:
// - Every pointer argument is device memory (tokens, targets, the loss's sum and the seed
//   of backward included); no op waits for the device.
// - The linear layers' and the LM head's products run on cuBLASLt with fp32 accumulation
//   and fp32 output (GemmPlan, core/cuda/gemm_plan.h), their plans cached per key. A linear
//   layer without a residual adds its bias in cuBLASLt's epilogue and stores straight in
//   the storage type (its own kernel where cuBLASLt has no such algorithm).
// - 16-bit storage feeds 16-bit operands of the same type (a copy of the weights made by
//   set_weights, dout rounded where it enters a product, as CpuBackend does); fp32 storage
//   uses true fp32 products unless TF32 is asked for.
// - Attention is fused (core/cuda/flash_attention.h): its state is one fp32 log-sum-exp per
//   query row, (B, NH, T), and backward recomputes the probabilities from it. bf16 runs
//   its products on tensor cores (bf16 P, dO and dS operands); fp32 and fp16 run the SIMT
//   kernel in fp32. Head sizes past 128 are an InputError, from the counting pass too.
// - Every other op computes in fp32 and rounds when it stores (round to nearest even,
//   bit-identical to core/dtype.h), so recomputed activations are the first ones.
// - All scratch comes from the (device) arena: no allocation inside a step. set_weights
//   allocates the 16-bit weight copy once per parameter-buffer size.
// - Weight gradients of the embedding and of LayerNorm/bias column sums, and attention's
//   dq, add with atomics, so they may differ from run to run in the last bits (the CPU
//   backend's do not).
#pragma once

#include <cstddef>
#include <memory>

#include "core/backend.h"

namespace ringstep::cuda {

// Throws InputError when no CUDA device is usable. Makes this rank's GPU current
// first (use_local_device, core/cuda/device.h).
std::unique_ptr<Backend> make_cuda_backend(DType act_dtype, bool tf32);

// The cuBLASLt plans BACKEND (made by make_cuda_backend) has built so far: one per distinct
// product; a steady training step adds none.
size_t gemm_plans_built(const Backend& backend);
// Of those, the ones cuBLASLt has no algorithm for (an epilogue the backend then runs with
// its own kernels).
size_t gemm_plans_without_algorithm(const Backend& backend);

}  // namespace ringstep::cuda
