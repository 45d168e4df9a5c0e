// The rules of one optimizer step, written once for the host and for a device: the loss
// scaler's state machine (optim/loss_scaler.h), the LR schedule (optim/schedule.h), the
// clip coefficient (optim/clip.h), and decide_step, which applies them to a step whose
// scalars live in a runtime's memory (core/runtime.h's deferred passes), so that a GPU
// decides each step without the host and the host reads what it decided once per log
// interval. Host and device code; plain structs, copied by value into kernels.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/config.h"  // LrScheduleKind, kMaxLossScale
#include "core/host_device.h"
#include "core/optim_math.h"

namespace ringstep {

// What a checkpoint saves to resume the loss scaler exactly.
struct LossScalerState {
  double scale = 1.0;
  int growth_tracker = 0;      // clean steps in a row since the last growth or overflow
  int hysteresis_tracker = 1;  // overflows left before a backoff; reset only at growth
  int consecutive_skips = 0;
  int64_t skipped_total = 0;

  bool operator==(const LossScalerState&) const = default;
};

// The loss scaler's schedule, resolved from precision.loss_scale (loss_scale_rule,
// optim/loss_scaler.h): a dynamic scale moves; static and none only count skips.
struct LossScaleRule {
  bool dynamic = false;
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 1.0;
  int growth_interval = 2000, hysteresis = 1, max_consecutive_skips = 50;
};

// Advances S with the step's agreed flag (Megatron-LM's DynamicGradScaler); returns whether
// the step is applied. Hysteresis is re-armed only at growth, so once it has run out every
// further overflow backs off; it is clamped at 0, which `<= 0` in Megatron treats alike.
RINGSTEP_HD bool advance_loss_scale(LossScalerState& s, const LossScaleRule& r, bool found_inf) {
  if (found_inf) {
    ++s.consecutive_skips;
    ++s.skipped_total;
    if (r.dynamic) {
      s.growth_tracker = 0;
      s.hysteresis_tracker = s.hysteresis_tracker > 1 ? s.hysteresis_tracker - 1 : 0;
      if (s.hysteresis_tracker == 0) {
        const double backed_off = s.scale * r.backoff_factor;
        s.scale = backed_off > r.min_scale ? backed_off : r.min_scale;
      }
    }
    return false;
  }
  s.consecutive_skips = 0;
  if (r.dynamic && ++s.growth_tracker >= r.growth_interval) {
    s.growth_tracker = 0;
    s.hysteresis_tracker = r.hysteresis;
    const double grown = s.scale * r.growth_factor;
    s.scale = grown < kMaxLossScale ? grown : kMaxLossScale;
  }
  return true;
}

// The scaler gives up: max_consecutive_skips steps in a row were skipped.
RINGSTEP_HD bool loss_scale_gives_up(const LossScalerState& s, const LossScaleRule& r) {
  return s.consecutive_skips >= r.max_consecutive_skips;
}

// Learning-rate schedules: linear warmup from lr/warmup to lr over warmup_steps, then
// cosine | linear decay to lr * min_lr_ratio at `steps`, or constant. Steps are 0-based.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int warmup_steps = 0;
  int steps = 1;

  RINGSTEP_HD double at(int step) const {
    if (step < warmup_steps) return lr * double(step + 1) / warmup_steps;
    if (kind == LrScheduleKind::constant) return lr;
    const double min_lr = lr * min_lr_ratio;
    const int decay_steps = steps - warmup_steps > 1 ? steps - warmup_steps : 1;
    const double raw = double(step - warmup_steps) / decay_steps;
    const double frac = raw < 0.0 ? 0.0 : raw > 1.0 ? 1.0 : raw;
    if (kind == LrScheduleKind::linear) return lr - (lr - min_lr) * frac;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * frac));
  }
};

// The factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 or norm <= max_norm). Matches torch.nn.utils.clip_grad_norm_ (eps 1e-6).
RINGSTEP_HD double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  return max_norm / (norm + 1e-6);
}

// --- a step decided in a runtime's memory -------------------------------------------------

// Everything decide_step needs besides the step's own scalars; fixed for a run.
struct StepRule {
  LossScaleRule scaler;
  LrSchedule schedule;
  double grad_clip = 1.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;  // AdamW's
  int grad_accum_steps = 1;
  bool stop_on_bad = false;  // an inf/NaN ends the run (no loss scaling, train.on_nan: stop)
};

// What one step hands the next, in the runtime's memory: the host's mirror of it (the
// scaler's state, the optimizer's step count) is refreshed whenever it reads.
struct StepCarry {
  LossScalerState scaler;
  int64_t t = 0;         // applied optimizer steps (AdamW's t)
  float dloss = 1.0f;    // the next backward's seed: float(scale / grad_accum_steps)
  uint32_t stopped = 0;  // an earlier step ended the run: later steps change nothing
};

// One step's scalars, in the runtime's memory: LOSS_SUM, BAD and NORM_SQ are filled by the
// step's passes (from zero), the rest by decide_step.
struct DeferredStep {
  double loss_sum = 0;  // the micro-batches' mean losses (each as a float), added in order
  double norm_sq = 0;   // the unscaled gradients' sum of squares
  double scale = 1;     // the loss scale backward ran with
  double lr = 0;        // the schedule's value at the step's t (skipped steps too)
  AdamWStep adam{};     // the update's scalars, where applied
  float decay = 0;      // lr * weight_decay, for the tensors that decay
  uint32_t bad = 0;     // an inf or NaN in the gradients (set by the check) or the loss
  uint32_t applied = 0;
  uint32_t after_stop = 0;  // the run had ended before this step: it changed nothing
};

// The host's sequence for one step (the loss scaler's check, its update, the schedule, the
// clip, AdamW's bias corrections), on the runtime: C and D in the runtime's memory.
RINGSTEP_HD void decide_step(const StepRule& r, StepCarry& c, DeferredStep& d) {
  d.scale = c.scaler.scale;
  d.lr = r.schedule.at(int(c.t));
  if (c.stopped) {
    d.after_stop = 1;
    return;
  }
  if (!isfinite(d.loss_sum / r.grad_accum_steps)) d.bad = 1;
  d.applied = advance_loss_scale(c.scaler, r.scaler, d.bad != 0);
  if (d.applied) {
    ++c.t;
    const double coefficient = clip_coefficient(sqrt(d.norm_sq), r.grad_clip);
    d.adam = adamw_scalars(r.beta1, r.beta2, r.eps, d.lr, c.t, coefficient);
    d.decay = float(d.lr * r.weight_decay);
  }
  if ((d.bad && r.stop_on_bad) || loss_scale_gives_up(c.scaler, r.scaler)) c.stopped = 1;
  c.dloss = float(c.scaler.scale / r.grad_accum_steps);
}

}  // namespace ringstep
