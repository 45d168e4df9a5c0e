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

// 1-bit Adam's per-element math (optim/onebit_adam.h), the one definition that the host
// path's momentum input, both runtimes' passes and the CUDA kernels use.

// This rank's momentum b1 m + (1 - b1) g GRAD_SCALE, what the compressed exchange averages.
RINGSTEP_HD float onebit_local_momentum(float m, float g, float beta1, float grad_scale) {
  return beta1 * m + (1.0f - beta1) * (g * grad_scale);
}

// The scalars of a compression-stage update: the step size lr / (1 - b1^t) and the frozen
// variance's bias correction 1 / sqrt(1 - b2^T), T = freeze_step.
struct OneBitStep {
  float step_size, inv_sqrt_c2, eps;
};

// The scalars of step T (1-based, Adam's count) with the variance frozen at FREEZE_STEP.
RINGSTEP_HD OneBitStep onebit_scalars(double beta1, double beta2, double eps, double lr, int64_t t,
                                      int64_t freeze_step) {
  const double c1 = 1.0 - pow(beta1, double(t)), c2 = 1.0 - pow(beta2, double(freeze_step));
  return {float(lr / c1), float(1.0 / sqrt(c2)), float(eps)};
}

// Whether a coordinate takes momentum steps: its frozen variance is not 0. Where it is 0 (no
// gradient in the warm-up) the momentum and both error buffers are held at 0.
RINGSTEP_HD bool onebit_live(float v) { return v != 0.0f; }

// One parameter's update with the averaged momentum M and frozen variance V, decoupled decay
// DECAY; a coordinate that is not live gets the decay only (-0 adds nothing).
RINGSTEP_HD void onebit_param_element(float& p, float m, float v, const OneBitStep& s,
                                      float decay) {
  const float momentum_step = s.step_size * m / (sqrtf(v) * s.inv_sqrt_c2 + s.eps);
  p -= (onebit_live(v) ? momentum_step : -0.0f) + decay * p;
}

}  // namespace ringstep
