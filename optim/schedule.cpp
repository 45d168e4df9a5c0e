#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ringstep {

double LrSchedule::at(int step) const {
  if (step < warmup_steps) return lr * double(step + 1) / warmup_steps;
  if (kind == LrScheduleKind::constant) return lr;
  const double min_lr = lr * min_lr_ratio;
  const int decay_steps = std::max(1, steps - warmup_steps);
  const double frac = std::clamp(double(step - warmup_steps) / decay_steps, 0.0, 1.0);
  if (kind == LrScheduleKind::linear) return lr - (lr - min_lr) * frac;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * frac));
}

}  // namespace ringstep
