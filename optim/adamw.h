// AdamW (Loshchilov & Hutter 2019): bias-corrected moments, decoupled weight decay applied
// only to tensors the registry marks `decay` (not LayerNorm weights, not biases). Moments
// are fp32 flat buffers laid out by the parameters' registry, on the device of the
// parameters; the update is the runtime's pass (core/runtime.h), elementwise, so the result
// does not depend on the thread count.
#pragma once

#include <cstdint>
#include <utility>

#include "core/registry.h"
#include "optim/optimizer.h"

namespace ringstep {

struct AdamWParams {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

// On the Optimizer seam: gradients always averaged, no exchange of its own, no stage.
class AdamW final : public Optimizer {
 public:
  // Moments on DEVICE (InputError where runtime() refuses it).
  AdamW(const Registry& reg, const AdamWParams& hp, Device device = Device::cpu);
  // Moments in RT's memory (a test's own runtime).
  AdamW(const Registry& reg, const AdamWParams& hp, Runtime& rt);
  // One update: grads are multiplied by GRAD_SCALE first (unscaling and clipping in one
  // factor), then params -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * params). Runs on the
  // moments' runtime; PARAMS and GRADS must live there too (std::logic_error otherwise).
  void step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale);
  // The same update on host arrays laid out by the registry (moments in host memory).
  void step(float* params, const float* grads, double lr, double grad_scale);
  int64_t step_count() const override { return t_; }
  void set_step_count(int64_t t) override { t_ = t; }
  FlatBuffer& m() { return m_; }
  FlatBuffer& v() { return v_; }
  const FlatBuffer& m() const { return m_; }
  const FlatBuffer& v() const { return v_; }
  size_t state_bytes() const override { return m_.bytes() + v_.bytes(); }

  // Optimizer: every step on averaged gradients.
  bool wants_allreduce(int) const override { return true; }
  std::optional<OneBitStage> stage(int) const override { return std::nullopt; }
  bool begin_under_backward(const float*, double, Reducer&) override { return false; }
  SignExchange step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale,
                    Reducer&) override {
    step(params, grads, lr, grad_scale);
    return {};
  }
  SignExchange skip(Reducer&) override { return {}; }
  // Its whole step can be decided on the runtime: the hyper-parameters go into RULE.
  bool fill_deferred_rule(StepRule& rule) const override;
  void step_deferred(FlatBuffer& params, const FlatBuffer& grads,
                     const DeferredStep* decided) override;
  // "adam_m", "adam_v": replicated.
  std::vector<StateTensor> state_tensors() override;

 private:
  // Advances Adam's step count and returns that step's scalars and LR * weight decay.
  std::pair<AdamWStep, float> next_step(double lr, double grad_scale);

  const Registry& reg_;
  AdamWParams hp_;
  FlatBuffer m_, v_;
  int64_t t_ = 0;
};

}  // namespace ringstep
