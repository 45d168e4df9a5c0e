// A Backend that times the ops of another (the decorator at the backend seam): while its
// OpClock is on, every call is one op of the clock's profile, with the FLOPs and bytes its
// shapes imply (core/op_cost.h and docs/metrics.md, "Measured
// roofline"); while it is off, a call costs one branch. Counting-arena calls are never
// timed. A matrix product is named by the parameter its weight points into: WEIGHT_OPS maps
// element offsets in the buffer given to set_weights to ops (std::logic_error for an
// offset it lacks, on a timed call). Not thread-safe, like every Backend.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/op_profile.h"

namespace ringstep {

class TimedBackend final : public Backend {
 public:
  // CLOCK must outlive the backend.
  TimedBackend(std::unique_ptr<Backend> inner, OpClock& clock,
               std::vector<std::pair<size_t, Op>> weight_ops);

  Device device() const override { return inner_->device(); }
  DType act_dtype() const override { return inner_->act_dtype(); }
  void set_weights(const float* params, size_t n) override;
  size_t weight_copy_bytes(size_t n) const override { return inner_->weight_copy_bytes(n); }
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
  size_t attention_state_bytes(int B, int T, int NH) const override {
    return inner_->attention_state_bytes(B, T, NH);
  }
  void attention_forward(void* out, void* state, const void* qkv, int B, int T, int C, int NH,
                         Arena& arena) override;
  void attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out,
                          const void* state, int B, int T, int C, int NH, Arena& arena) override;
  void gelu_forward(void* out, const void* inp, int N, int C, Arena& arena) override;
  void gelu_backward(float* d, const void* inp, int N, int C, Arena& arena) override;
  // Where the inner backend fuses them, one op under the product's name with the cost of
  // both; otherwise the default's two ops, each timed.
  void linear_gelu_forward(void* out, void* pre, const void* inp, const float* weight,
                           const float* bias, int N, int C, int OC, Arena& arena) override;
  void linear_backward_gelu(float* dinp, float* dweight, float* dbias, const float* dout,
                            const void* inp, const float* weight, const void* gelu_inp, int N,
                            int C, int OC, Arena& arena) override;
  bool fuses_gelu() const override { return inner_->fuses_gelu(); }
  void crossentropy_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V, double* loss_sum,
                            Arena& arena) override;
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                             const float* dloss, int N, int V, Arena& arena) override;

 private:
  // Runs F as one call of OP costing COST when the clock is on and ARENA is real.
  template <class F>
  auto time(Op op, const Arena& arena, const OpCost& cost, F&& f);
  bool timing(const Arena& arena) const { return clock_.on() && !arena.counting(); }
  Op weight_op(const float* weight) const;
  double act_bytes() const;  // bytes of one stored value

  std::unique_ptr<Backend> inner_;
  OpClock& clock_;
  std::vector<std::pair<size_t, Op>> weight_ops_;
  const float* params_ = nullptr;
};

}  // namespace ringstep
