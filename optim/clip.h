// Global-norm gradient clipping (Pascanu et al. 2013): one pass over the flat gradient
// buffer, accumulated in double so the norm does not depend on summation luck.
#pragma once

#include <cstddef>

namespace ringstep {

class FlatBuffer;

// Sum of squares of grads[0, n) (host memory), in double (core/cpu/optim_passes.h).
double sum_squares(const float* grads, size_t n);
// The same over GRADS, on its runtime (core/runtime.h).
double sum_squares(const FlatBuffer& grads);
// The factor to multiply gradients by so their norm is at most max_norm (1 when
// max_norm <= 0 or norm <= max_norm). Matches torch.nn.utils.clip_grad_norm_ (eps 1e-6).
double clip_coefficient(double norm, double max_norm);

}  // namespace ringstep
