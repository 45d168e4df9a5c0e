#include "core/cpu/optim_passes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ringstep::cpu {

double sum_squares(const float* x, size_t n) {
  constexpr size_t kBlock = 1024;
  double total = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = b + kBlock < n ? b + kBlock : n;
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (size_t i = b; i < e; ++i) part += x[i] * x[i];
    total += part;
  }
  return total;
}

bool unscale_and_check(float* x, size_t n, float inv) {
  // x - x is 0 for a finite x and NaN for an inf or a NaN, and NaN survives any sum, so
  // the sum is NaN exactly when some element is not finite. Unlike a branch on
  // std::isfinite, this vectorises. (Never -ffast-math: it would fold x - x to 0.)
  float bad = 0.0f;
  if (inv == 1.0f) {
#pragma omp simd reduction(+ : bad)
    for (size_t i = 0; i < n; ++i) bad += x[i] - x[i];
  } else {
#pragma omp simd reduction(+ : bad)
    for (size_t i = 0; i < n; ++i) {
      x[i] *= inv;
      bad += x[i] - x[i];
    }
  }
  return std::isnan(bad);
}

void adamw_update(const std::vector<TensorInfo>& tensors, const AdamWStep& s, float decay,
                  float* params, const float* grads, float* m, float* v) {
  constexpr size_t kChunk = 16384;  // the unit of parallel work, within one tensor
  size_t total = 0;
  for (const TensorInfo& t : tensors) total += t.numel;
#pragma omp parallel if (total >= 4 * kChunk)
  for (const TensorInfo& t : tensors) {
    const float d = t.decay ? decay : 0.0f;
    const std::ptrdiff_t chunks = std::ptrdiff_t((t.numel + kChunk - 1) / kChunk);
#pragma omp for schedule(static) nowait
    for (std::ptrdiff_t c = 0; c < chunks; ++c) {
      const size_t at = t.offset + size_t(c) * kChunk;
      const size_t len = std::min(kChunk, t.numel - size_t(c) * kChunk);
      float* __restrict p = params + at;
      const float* __restrict g = grads + at;
      float* __restrict mt = m + at;
      float* __restrict vt = v + at;
#pragma omp simd
      for (size_t i = 0; i < len; ++i) adamw_element(p[i], g[i], mt[i], vt[i], s, d);
    }
  }
}

void onebit_momentum(float* m, const float* grads, size_t begin, size_t end, float beta1,
                     float grad_scale) {
  float* __restrict mt = m + begin;
  const float* __restrict g = grads + begin;
  const size_t n = end - begin;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) mt[i] = onebit_local_momentum(mt[i], g[i], beta1, grad_scale);
}

// Per tensor: the update in one vectorised loop that counts the dead coordinates, and the
// masking in a second, only where there are any.
void onebit_update(const std::vector<TensorInfo>& tensors, size_t begin, size_t end,
                   const OneBitStep& s, float decay, float* params, float* m, const float* v,
                   float* ew, float* es) {
  for (const TensorInfo& t : tensors) {
    const float d = t.decay ? decay : 0.0f;
    const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    size_t dead = 0;
#pragma omp simd reduction(+ : dead)
    for (size_t i = lo; i < hi; ++i) {
      onebit_param_element(params[i], m[i], v[i], s, d);
      dead += !onebit_live(v[i]);
    }
    if (dead == 0) continue;
    for (size_t i = lo; i < hi; ++i)
      if (!onebit_live(v[i])) m[i] = ew[i] = es[i] = 0.0f;
  }
}

}  // namespace ringstep::cpu
