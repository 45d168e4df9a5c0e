// Learning-rate schedules: linear warmup from lr/warmup to lr over warmup_steps, then
// cosine | linear decay to lr * min_lr_ratio at `steps`, or constant. Steps are 0-based.
#pragma once

#include "core/config.h"  // LrScheduleKind

namespace ringstep {

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::cosine;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int warmup_steps = 0;
  int steps = 1;
  double at(int step) const;
};

}  // namespace ringstep
