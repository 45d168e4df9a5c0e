// The optimizer's passes over host arrays: the CPU runtime's (core/runtime.h) and the ones
// optim/ calls on plain pointers. Each is elementwise or a fixed-order reduction, so results
// do not depend on the thread count.
#pragma once

#include <cstddef>
#include <vector>

#include "core/optim_math.h"
#include "core/registry.h"

namespace ringstep::cpu {

// The sum of x[0, n)^2: blocks of 1024 float partial sums folded into double, which
// vectorises and keeps the relative error near 1024 float roundings of a block.
double sum_squares(const float* x, size_t n);

// X[0, n) *= INV_SCALE (skipped when it is 1), then true iff any element is inf or NaN.
bool unscale_and_check(float* x, size_t n, float inv_scale);

// AdamW step S on each of TENSORS (decayed ones with DECAY), on the compute thread pool over
// fixed chunks of each tensor.
void adamw_update(const std::vector<TensorInfo>& tensors, const AdamWStep& s, float decay,
                  float* params, const float* grads, float* m, float* v);

// 1-bit Adam's passes (core/runtime.h's onebit_momentum and onebit_update), on the calling
// thread: they run a part of the vector at a time, between the parts of an exchange.
void onebit_momentum(float* m, const float* grads, size_t begin, size_t end, float beta1,
                     float grad_scale);
void onebit_update(const std::vector<TensorInfo>& tensors, size_t begin, size_t end,
                   const OneBitStep& s, float decay, float* params, float* m, const float* v,
                   float* worker_error, float* server_error);

}  // namespace ringstep::cpu
