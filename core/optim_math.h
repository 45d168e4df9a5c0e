// AdamW's per-element math, the one definition that both runtimes' passes use: the CPU loop
// (core/cpu/optim_passes.cpp) and the CUDA kernel (core/cuda/optim_cuda.cu). Host and
// device code.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"

namespace ringstep {

// The scalars of one AdamW step: bias corrections folded into the step
// size and eps (Kingma & Ba 2015, sec. 2); DECAY = lr * weight_decay for decayed tensors.
struct AdamWStep {
  float beta1, beta2, eps, step_size, inv_sqrt_c2, grad_scale;
};

// The scalars of step T (1-based).
RINGSTEP_HD AdamWStep adamw_scalars(double beta1, double beta2, double eps, double lr, int64_t t,
                                    double grad_scale) {
  const double c1 = 1.0 - pow(beta1, double(t)), c2 = 1.0 - pow(beta2, double(t));
  return {float(beta1), float(beta2), float(eps), float(lr / c1), float(1.0 / sqrt(c2)),
          float(grad_scale)};
}

// One element of AdamW::step: g scaled, moments updated, decoupled decay.
RINGSTEP_HD void adamw_element(float& p, float g, float& m, float& v, const AdamWStep& s,
                               float decay) {
  const float gi = g * s.grad_scale;
  m = s.beta1 * m + (1.0f - s.beta1) * gi;
  v = s.beta2 * v + (1.0f - s.beta2) * gi * gi;
  const float denom = sqrtf(v) * s.inv_sqrt_c2 + s.eps;
  p -= s.step_size * m / denom + decay * p;
}

}  // namespace ringstep
