// Global-norm gradient clipping (Pascanu et al. 2013): one pass over the flat gradient
// buffer, accumulated in double so the norm does not depend on summation luck.
#pragma once

#include <cstddef>

#include "core/step_math.h"  // clip_coefficient

namespace ringstep {

class FlatBuffer;

// Sum of squares of grads[0, n) (host memory), in double (core/cpu/optim_passes.h).
double sum_squares(const float* grads, size_t n);
// The same over GRADS, on its runtime (core/runtime.h).
double sum_squares(const FlatBuffer& grads);

}  // namespace ringstep
