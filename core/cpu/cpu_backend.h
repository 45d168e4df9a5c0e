// The CPU backend (core/backend.h), for each storage dtype:
// - fp32: activations are fp32 and the ops of core/cpu/ops.h run on them directly, whole
//   tensors at a time, with no scratch.
// - bf16 or fp16 (docs/precision.md): matrix products and attention take the 16-bit values
//   as they are (gemm16, attention16: fp32 accumulation) with a 16-bit copy of the weights
//   made by set_weights(); every other op widens row blocks to fp32 arena scratch,
//   computes in fp32 and rounds its output when storing it. Every consumer reads the
//   stored (rounded) value, so a recomputed forward reproduces the first one bit for bit.
//   The fp32 scratch is one row block's, never a whole tensor's (the arena peak shows the
//   16-bit storage); the exception is the embedding output, converted whole.
// Row blocks run in a fixed order, so the weight gradients sum the blocks' contributions
// in the same order on every call.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/cpu/gemm16.h"

namespace ringstep::cpu {

class CpuBackend final : public Backend {
 public:
  // Rows per block of the 16-bit ops that convert to fp32, and of the 16-bit matrix
  // products (larger: each block's fp32 result is scratch; the weight is packed once for
  // all of a product's blocks).
  static constexpr int kRowBlock = 256;
  static constexpr int kGemmRowBlock = 512;

  explicit CpuBackend(DType act_dtype);  // f32, bf16 or f16

  Device device() const override { return Device::cpu; }
  DType act_dtype() const override { return dt_; }
  void set_weights(const float* params, size_t n) override;
  // The 16-bit copy, and where gemm16 widens (fp16, or bf16 without a bf16 kernel) that copy
  // widened to fp32.
  size_t weight_copy_bytes(size_t n) const override;
  void zero(float* x, size_t n, Arena& arena) override;
  void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, Arena& arena) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, Arena& arena) override;
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* weight,
                         const float* bias, int N, int C, Arena& arena) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const void* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C, Arena& arena) override;
  void linear_forward(void* out, const void* inp, const float* weight, const float* bias,
                      const void* residual, int N, int C, int OC, Arena& arena) override;
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const void* inp, const float* weight, int N, int C, int OC,
                       Arena& arena) override;
  void logits_forward(float* logits, const void* inp, const float* wte, int N, int C, int V,
                      int vocab,
                      Arena& arena) override;
  // The state is the probabilities (B, NH, T, T), stored in act_dtype.
  size_t attention_state_bytes(int B, int T, int NH) const override;
  void attention_forward(void* out, void* state, const void* qkv, int B, int T, int C, int NH,
                         Arena& arena) override;
  void attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out,
                          const void* state, int B, int T, int C, int NH, Arena& arena) override;
  void gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) override;
  void gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) override;
  void crossentropy_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V, double* loss_sum,
                            Arena& arena) override;
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                             const float* dloss, int N, int V, Arena& arena) override;

 private:
  bool half() const { return dt_ != DType::f32; }
  // The 16-bit copy of weight W, a pointer into set_weights' buffer (std::logic_error if
  // it is not one).
  const uint16_t* w16(const float* w) const;
  // W's copy as a gemm16 operand (leading dim LD), with its widening back to fp32 where
  // gemm16 widens its operands (gemm16_widens): made once per set_weights instead of in every
  // product.
  Operand16 weight_operand(const float* w, int ld) const;

  DType dt_;
  const float* params_ = nullptr;
  size_t params_n_ = 0;
  std::vector<uint16_t> weights16_;
  std::vector<float> weights32_;  // empty unless gemm16_widens(dt_)
  // The weight operand of the 16-bit linear being computed, packed once for its row blocks
  // (a view of weights16_ or weights32_ where gemm16 widens).
  PackedB16 packed_weight_;
};

}  // namespace ringstep::cpu
