#include "optim/clip.h"

#include "core/cpu/optim_passes.h"
#include "core/registry.h"

namespace ringstep {

double sum_squares(const float* grads, size_t n) { return cpu::sum_squares(grads, n); }

double sum_squares(const FlatBuffer& grads) {
  return grads.runtime().sum_squares(grads.data(), grads.size());
}

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  return max_norm / (norm + 1e-6);
}

}  // namespace ringstep
