// Loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed Precision Training"): the
// loss is multiplied by S before backward so that small gradients survive fp16, and the
// gradients are multiplied by 1/S before the optimizer sees them. The dynamic schedule is
// Megatron-LM's DynamicGradScaler; docs/precision.md draws the state machine.
//
// In every mode (none too, and with fp32 or bf16) a step whose gradients hold an inf or a
// NaN on any rank is skipped on every rank and counts toward max_consecutive_skips: no
// non-finite value is ever written into the weights or the moments.
//
// Per optimizer step, after the gradient AllReduce (the flag agreed by optim/reducer.h's
// Reducer::any_rank, so that every rank makes the same decision):
//   bool found = reducer.any_rank(scaler.unscale_and_check(g, n));
//   if (scaler.update(found)) { clip; optimizer step; lr schedule advances }
//   if (scaler.should_stop()) throw ... scaler.stop_message();
// Not thread-safe; one instance per rank, all ranks fed the same agreed flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/step_math.h"  // LossScalerState, LossScaleRule, advance_loss_scale

namespace ringstep {

class FlatBuffer;

class LossScaler {
 public:
  // CFG must have passed the config checks (core/config.h); auto is resolved here.
  explicit LossScaler(const PrecisionConfig& cfg);

  LossScaleMode mode() const { return mode_; }  // resolved: never auto_
  // Multiply the loss (or the gradient of the loss) by this before backward.
  double scale() const { return state_.scale; }

  // One pass over GRADS[0, n): multiplies every element by 1/scale() (exact when the scale
  // is a power of two) and returns true if any element is then inf or NaN. Checks at
  // scale 1 too.
  bool unscale_and_check(float* grads, size_t n) const;
  // The same pass over GRADS, on its runtime (core/runtime.h).
  bool unscale_and_check(FlatBuffer& grads) const;

  // Advances the state machine with the agreed flag. Returns true if the step is to be
  // applied; false means skip it: parameters, moments, Adam's step count and the LR
  // schedule must all stay as they are.
  bool update(bool found_inf);

  // consecutive skips have reached max_consecutive_skips: the caller stops the run.
  bool should_stop() const;
  // What happened and what to try, for the error that stops the run.
  std::string stop_message() const;

  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& s) { state_ = s; }
  // The schedule update() follows, for a runtime that decides steps itself.
  const LossScaleRule& rule() const { return rule_; }

 private:
  LossScaleConfig cfg_;
  LossScaleRule rule_;
  DType dtype_;
  LossScaleMode mode_;
  LossScalerState state_;
};

// What can go wrong with a config that is allowed but risky (fp16 without loss scaling, a
// static scale of 1 or less with fp16, a hysteresis that outlasts max_consecutive_skips),
// one line per risk; "" when there is none.
std::string loss_scale_warning(const PrecisionConfig& cfg);

}  // namespace ringstep
