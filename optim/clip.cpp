#include "optim/clip.h"

namespace ringstep {

double sum_squares(const float* grads, size_t n) {
  // Blocks of float partial sums folded into double: vectorises and stays accurate.
  constexpr size_t kBlock = 1024;
  double total = 0.0;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = b + kBlock < n ? b + kBlock : n;
    float part = 0.0f;
#pragma omp simd reduction(+ : part)
    for (size_t i = b; i < e; ++i) part += grads[i] * grads[i];
    total += part;
  }
  return total;
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  return max_norm / (norm + 1e-6);
}

}  // namespace ringstep
