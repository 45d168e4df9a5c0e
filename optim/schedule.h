// Learning-rate schedules: LrSchedule (linear warmup, then cosine | linear decay, or
// constant) is defined in core/step_math.h, where a device's step decision uses it too.
#pragma once

#include "core/step_math.h"
