#include "optim/clip.h"

#include "core/cpu/optim_passes.h"
#include "core/registry.h"

namespace ringstep {

double sum_squares(const float* grads, size_t n) { return cpu::sum_squares(grads, n); }

double sum_squares(const FlatBuffer& grads) {
  return grads.runtime().sum_squares(grads.data(), grads.size());
}

}  // namespace ringstep
