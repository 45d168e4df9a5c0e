// The ops a model runs on its stored activations, behind one interface per device (ggml's
// backend seam): the model calls these and nothing else that touches activation memory, so
// adding a device touches no model code. make_backend picks the implementation.
//
// Contracts shared by every op:
// - Shapes are explicit arguments (llm.c style, see core/cpu/ops.h): B batch, T sequence
//   length, C channels, OC output channels, NH heads, V vocabulary, N = B*T rows.
//   Row-major. The caller owns every buffer; ops keep no pointer after returning, except
//   set_weights (see there).
// - "Stored" arguments (void*) hold act_dtype() values in the backend's device memory: the
//   activations a model saves. float* arguments are fp32: parameters, gradients,
//   LayerNorm statistics, logits, probabilities, losses and gradients w.r.t. activations.
// - Weight and bias arguments point into the parameter buffer last given to set_weights().
// - Backward ops ADD into their parameter gradients (+=) and into dqkv; the gradient of a
//   linear's input and of the logits is WRITTEN (old contents, even NaN, ignored), so the
//   model zeroes no buffer before them. A null gradient output marked "may be null" is not
//   computed.
// - ARENA: temporaries come from it and are released before the op returns. When
//   arena.counting(), the op makes exactly the allocations it would make for real and
//   computes nothing: its pointer arguments may point nowhere and are not touched.
// - The result of an op depends only on its inputs and on each buffer's offset from a
//   64-byte boundary (a CPU row reduction starts its vector loop at the first aligned
//   element), not on thread counts: with the arena's 64-byte aligned tensors,
//   recomputing a forward gives the same bits.
// Not thread-safe: one backend per model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/arena.h"
#include "core/device.h"
#include "core/dtype.h"

namespace ringstep {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual DType act_dtype() const = 0;  // storage of the "stored" arguments

  // PARAMS[0, N) is the parameter buffer that weight arguments point into; it must outlive
  // the backend's use of it. Call again whenever its values change: a 16-bit backend
  // rounds its own copy of the weights here, and its matrix products read that copy.
  virtual void set_weights(const float* params, size_t n) = 0;
  // Bytes the backend keeps for its own copies of N parameters' weights once set_weights
  // has run (0 for fp32: the products read the parameters where they are).
  virtual size_t weight_copy_bytes(size_t n) const = 0;
  // x[0, N) = 0.
  virtual void zero(float* x, size_t n, Arena& arena) = 0;

  // out (N, C) = wte[tokens[n]] + wpe[n % T]. TOKENS (N) are in the backend's memory (the
  // model uploads a micro-batch's inputs and targets once: models/gpt.h).
  virtual void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe,
                               int B, int T, int C, Arena& arena) = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                int B, int T, int C, Arena& arena) = 0;

  // out (N, C) = LayerNorm(inp) * weight + bias; mean (N), rstd (N) saved for backward.
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 Arena& arena) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const void* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C, Arena& arena) = 0;

  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC) [+ residual (N, OC), stored,
  // when not null].
  virtual void linear_forward(void* out, const void* inp, const float* weight, const float* bias,
                              const void* residual, int N, int C, int OC, Arena& arena) = 0;
  // dinp (N, C) = dout @ weight (written); dweight (OC, C) += dout^T @ inp; dbias (OC) +=
  // column sums of dout. dinp and dbias may be null. A 16-bit backend rounds dout to
  // act_dtype where it enters a product (in fp16 a value past 65504 becomes inf: the loss
  // scaler's signal).
  virtual void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const void* inp, const float* weight, int N, int C, int OC,
                               Arena& arena) = 0;

  // The LM head: logits (N, V), fp32, = inp (N, C) @ wte (V, C)^T, no bias; columns VOCAB ..
  // V - 1 (the vocabulary's padding, GptSpec::vocab_rows) are -inf, so that the softmax
  // gives them nothing and their gradient is zero.
  virtual void logits_forward(float* logits, const void* inp, const float* wte, int N, int C, int V,
                              int vocab, Arena& arena) = 0;

  // Causal self-attention over qkv (B, T, 3C) = q | k | v: out (B, T, C) = softmax(q k^T /
  // sqrt(hs), causal) v with heads side by side (core/cpu/ops.h). STATE receives what
  // backward needs besides qkv and out, attention_state_bytes long, in the backend's own
  // format (its header says which: the CPU's probabilities, the GPU's row statistics).
  // attention_state_bytes(device(), act_dtype(), B, T, NH), below.
  virtual size_t attention_state_bytes(int B, int T, int NH) const = 0;
  virtual void attention_forward(void* out, void* state, const void* qkv, int B, int T, int C,
                                 int NH, Arena& arena) = 0;
  // dqkv (B, T, 3C) += the gradient through the op, from dout (B, T, C) and forward's out
  // and state.
  virtual void attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out,
                                  const void* state, int B, int T, int C, int NH, Arena& arena) = 0;

  // out (N, C) = GELU(inp), tanh approximation. Elementwise: any (N, C) view of a tensor.
  virtual void gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) = 0;
  // In place, not +=: d (N, C) holds dL/dout on entry and dL/dinp on return.
  virtual void gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) = 0;

  // The MLP's first product and its GELU: PRE (N, OC) = inp (N, C) @ weight (OC, C)^T + bias
  // and OUT (N, OC) = GELU(PRE), both stored (backward reads PRE). The default runs
  // linear_forward, then gelu_forward on gelu_view's rows: bit for bit those two calls. A
  // backend that fuses them (fuses_gelu(); cuda: cuBLASLt's GELU_AUX_BIAS epilogue) takes
  // GELU of PRE before PRE is rounded to act_dtype, so a recompute that rebuilds OUT from
  // the stored PRE alone must call gelu_forward in the first forward too.
  virtual void linear_gelu_forward(void* out, void* pre, const void* inp, const float* weight,
                                   const float* bias, int N, int C, int OC, Arena& arena);
  // linear_backward with DINP (not null) then multiplied by GELU'(GELU_INP), GELU_INP (N, C)
  // stored: the gradient through the product into the GELU's input. The default runs
  // linear_backward, then gelu_backward on gelu_view's rows; a fusing backend applies GELU'
  // in the product's epilogue (cuda: cuBLASLt's DGELU) where it can.
  virtual void linear_backward_gelu(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const void* inp, const float* weight, const void* gelu_inp,
                                    int N, int C, int OC, Arena& arena);
  // True where the two calls above are not the default's pair of ops.
  virtual bool fuses_gelu() const { return false; }

  // probs (N, V) = softmax(logits); losses (N) = -log probs[n, targets[n]]; then
  // *LOSS_SUM += the mean of the losses (summed in double, in row order, rounded to float).
  // TARGETS (N) and LOSS_SUM are in the backend's memory: nothing waits for the value.
  virtual void crossentropy_forward(float* losses, float* probs, const float* logits,
                                    const int32_t* targets, int N, int V, double* loss_sum,
                                    Arena& arena) = 0;
  // dlogits (N, V) = (probs - onehot(targets)) * (*dloss / N), the gradient of the mean loss
  // times the seed *DLOSS (the backend's memory, so that a device can decide it), written.
  virtual void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                     const float* dloss, int N, int V, Arena& arena) = 0;
};

// The (rows, cols) view the GELU ops take of an elementwise (N, W) tensor: rows as wide as
// NARROW where NARROW divides W (the MLP's (N, 4C) as (4N, C), so that a 16-bit backend's
// row block of scratch is as wide as the residual stream's), else (N, W).
inline std::pair<int, int> gelu_view(int N, int W, int narrow) {
  if (narrow > 0 && W % narrow == 0) return {N * (W / narrow), narrow};
  return {N, W};
}

// Bytes of what attention saves for backward on DEVICE with ACT activations, the one formula
// each device's backend answers with (so that a model not built can be sized): the CPU keeps
// the probabilities (B, NH, T, T) in ACT, the GPU one fp32 log-sum-exp per query row
// (core/cuda/flash_attention.h). In double, so that an absurd shape cannot overflow.
double attention_state_bytes(Device device, DType act, double B, double T, double NH);

// The backend for DEVICE storing activations as ACT_DTYPE (f32, bf16 or f16; cuda: f32 or
// bf16, core/cuda/cuda_backend.h). Device::cuda is an InputError without the CUDA backend
// or a usable GPU. TF32 lets a cuda backend's fp32 products use TF32 (the CPU ignores it).
std::unique_ptr<Backend> make_backend(Device device, DType act_dtype, bool tf32 = false);

}  // namespace ringstep
