#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/cpu/optim_passes.h"
#include "core/registry.h"

namespace ringstep {
namespace {

// "%g" keeps scales readable: 65536, 0.5, 1.67772e+07.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

LossScaler::LossScaler(const PrecisionConfig& cfg)
    : cfg_(cfg.loss_scale), dtype_(cfg.dtype), mode_(resolved_loss_scale_mode(cfg)) {
  const LossScaleConfig& c = cfg_;
  rule_ = {.dynamic = mode_ == LossScaleMode::dynamic,
           .growth_factor = c.growth_factor,
           .backoff_factor = c.backoff_factor,
           .min_scale = c.min_scale,
           .growth_interval = c.growth_interval,
           .hysteresis = c.hysteresis,
           .max_consecutive_skips = c.max_consecutive_skips};
  state_.scale = mode_ == LossScaleMode::none ? 1.0 : cfg_.initial;
  state_.hysteresis_tracker = cfg_.hysteresis;
}

bool LossScaler::unscale_and_check(float* grads, size_t n) const {
  return cpu::unscale_and_check(grads, n, static_cast<float>(1.0 / state_.scale));
}

bool LossScaler::unscale_and_check(FlatBuffer& grads) const {
  return grads.runtime().unscale_and_check(grads.data(), grads.size(),
                                           static_cast<float>(1.0 / state_.scale));
}

bool LossScaler::update(bool found_inf) { return advance_loss_scale(state_, rule_, found_inf); }

bool LossScaler::should_stop() const { return loss_scale_gives_up(state_, rule_); }

std::string LossScaler::stop_message() const {
  const LossScalerState& s = state_;
  std::string msg = std::to_string(s.consecutive_skips) +
                    " optimizer steps in a row were skipped because the gradients held inf or "
                    "NaN (precision.loss_scale.max_consecutive_skips is " +
                    std::to_string(cfg_.max_consecutive_skips) + "; dtype " + name(dtype_) +
                    ", loss scale mode " + name(mode_) + ", scale now " + num(s.scale) + "). ";
  if (mode_ == LossScaleMode::dynamic && s.scale > cfg_.min_scale) {
    msg += "The scale had not yet backed off to min_scale (" + num(cfg_.min_scale) +
           "): raise precision.loss_scale.max_consecutive_skips, or lower "
           "precision.loss_scale.hysteresis (" +
           std::to_string(cfg_.hysteresis) + ") or precision.loss_scale.initial. Otherwise ";
  } else if (mode_ == LossScaleMode::dynamic) {
    msg +=
        "The scale is at min_scale and the gradients still overflow, so the model itself "
        "produces inf/NaN";
    msg += cfg_.min_scale > 1.0 ? " (or min_scale " + num(cfg_.min_scale) +
                                      " is too high: lower precision.loss_scale.min_scale). "
                                : ". ";
    msg += "Try: ";
  } else if (mode_ == LossScaleMode::static_) {
    msg += "A static scale of " + num(s.scale) +
           " overflows: use precision.loss_scale.mode auto (dynamic for fp16) or a lower "
           "precision.loss_scale.initial. Otherwise ";
  } else {
    msg += "Nothing is scaled (mode none), so the gradients themselves are not finite. Try: ";
  }
  msg += "lower train.lr or lengthen train.warmup_steps; check the data (a bad token file)";
  if (dtype_ == DType::f16) msg += "; use precision.dtype bf16 (fp32's range, no scaling needed)";
  // Checkpoints keep the loss scaler's state and resume: auto (the default) picks the newest.
  msg +=
      "; then rerun with the same run.out_dir to resume from the last checkpoint (with "
      "checkpoint.every > 0).";
  return msg;
}

std::string loss_scale_warning(const PrecisionConfig& cfg) {
  const LossScaleConfig& ls = cfg.loss_scale;
  const LossScaleMode mode = resolved_loss_scale_mode(cfg);
  std::vector<std::string> lines;
  if (cfg.dtype == DType::f16 && mode == LossScaleMode::none) {
    lines.push_back(
        "precision.dtype is fp16 with precision.loss_scale.mode none: gradients below 2^-24 "
        "(6e-8) round to zero in fp16 and those below 2^-14 lose precision, so small updates "
        "vanish and training can stall or drift without any error (steps with inf/NaN "
        "gradients are still skipped). Use mode auto (dynamic for fp16) or precision.dtype "
        "bf16.");
  }
  if (cfg.dtype == DType::f16 && mode == LossScaleMode::static_ && ls.initial <= 1.0) {
    lines.push_back("precision.loss_scale.mode is static with initial " + num(ls.initial) +
                    " under fp16: nothing is scaled up, so small gradients underflow as with "
                    "mode none. Use a larger static scale (e.g. 1024) or mode dynamic.");
  }
  if (mode == LossScaleMode::dynamic && ls.hysteresis >= ls.max_consecutive_skips) {
    lines.push_back("precision.loss_scale.hysteresis (" + std::to_string(ls.hysteresis) +
                    ") >= max_consecutive_skips (" + std::to_string(ls.max_consecutive_skips) +
                    "): a burst of overflows stops the run before the scale first backs off. "
                    "Lower hysteresis or raise max_consecutive_skips.");
  }
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace ringstep
