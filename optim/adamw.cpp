#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "optim/device_passes.h"

namespace ringstep {

AdamW::AdamW(const Registry& reg, const AdamWParams& hp, Device device)
    : reg_(reg), hp_(hp), m_(reg.total_numel(), device), v_(reg.total_numel(), device) {
  for (const TensorInfo& t : reg_.tensors())
    for (size_t at = 0; at < t.numel; at += kChunk)
      chunks_.push_back({t.offset + at, std::min(kChunk, t.numel - at), t.decay});
}

void AdamW::step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale) {
  const Device d = m_.device();
  if (params.device() != d || grads.device() != d)
    throw std::logic_error("AdamW::step: parameters, gradients and moments on different devices");
  if (d == Device::cpu) return step(params.data(), grads.data(), lr, grad_scale);
  ++t_;
  adamw_on_device(reg_, hp_, t_, lr, grad_scale, params, grads, m_, v_);
}

void AdamW::step(float* params, const float* grads, double lr, double grad_scale) {
  if (m_.device() != Device::cpu)
    throw std::logic_error("AdamW::step: host arrays for moments on " +
                           std::string(name(m_.device())));
  ++t_;
  const float b1 = float(hp_.beta1), b2 = float(hp_.beta2), eps = float(hp_.eps);
  const float gs = float(grad_scale);
  // Bias corrections folded into the step size and eps (Kingma & Ba 2015, sec. 2).
  const double c1 = 1.0 - std::pow(hp_.beta1, double(t_));
  const double c2 = 1.0 - std::pow(hp_.beta2, double(t_));
  const float step_size = float(lr / c1);
  const float inv_sqrt_c2 = float(1.0 / std::sqrt(c2));
  float* m = m_.data();
  float* v = v_.data();
  const std::ptrdiff_t chunks = std::ptrdiff_t(chunks_.size());
#pragma omp parallel for schedule(static) if (reg_.total_numel() >= 4 * kChunk)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const Chunk& ch = chunks_[size_t(c)];
    const float decay = ch.decay ? float(lr * hp_.weight_decay) : 0.0f;
    float* __restrict p = params + ch.offset;
    const float* __restrict g = grads + ch.offset;
    float* __restrict mt = m + ch.offset;
    float* __restrict vt = v + ch.offset;
#pragma omp simd
    for (size_t i = 0; i < ch.numel; ++i) {
      const float gi = g[i] * gs;
      mt[i] = b1 * mt[i] + (1.0f - b1) * gi;
      vt[i] = b2 * vt[i] + (1.0f - b2) * gi * gi;
      const float denom = std::sqrt(vt[i]) * inv_sqrt_c2 + eps;
      p[i] -= step_size * mt[i] / denom + decay * p[i];
    }
  }
}

}  // namespace ringstep
