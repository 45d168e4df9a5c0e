// The optimizer-side passes over the flat buffers on the device, twins of optim/: AdamW's
// update (AdamW::step) and the loss scaler's unscale + inf/NaN check
// (LossScaler::unscale_and_check) in one pass. Device pointers; the stream is the legacy
// default stream, as the backend's. Failures throw (cuda_check.h). Plain C++ header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cuda/optim_math.h"

namespace ringstep::cuda {

// params[0, n) -= AdamW update of grads (see adamw_element), moments m, v updated in place.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWStep& step, float decay);

// grads[0, n) *= inv_scale (skipped when it is 1) and true iff some element is inf or NaN.
// FLAG is one device int of scratch. Blocks until the answer is on the host.
bool unscale_and_check(float* grads, size_t n, float inv_scale, int* flag);

}  // namespace ringstep::cuda
