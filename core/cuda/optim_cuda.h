// The optimizer-side passes over the flat buffers on the device, twins of optim/: AdamW's
// update (AdamW::step), the loss scaler's unscale + inf/NaN check
// (LossScaler::unscale_and_check) in one pass, and the global norm's sum of squares
// (optim/clip.h). Device pointers; the stream is the legacy default stream, as the
// backend's. Failures throw (cuda_check.h). Plain C++ header; the cuda runtime
// (core/cuda/device_runtime.h) is what calls it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/optim_math.h"
#include "core/step_math.h"

namespace ringstep::cuda {

// params[0, n) -= AdamW update of grads (see adamw_element), moments m, v updated in place.
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWStep& step, float decay);

// grads[0, n) *= inv_scale (skipped when it is 1) and true iff some element is inf or NaN.
// FLAG is one device int of scratch. Blocks until the answer is on the host.
bool unscale_and_check(float* grads, size_t n, float inv_scale, int* flag);

// Blocks of the norm reduction, and so the partial sums it needs as scratch.
constexpr int kNormBlocks = 1024;
// The sum over [0, n) of x[i]^2, accumulated in double: each of kNormBlocks blocks reduces a
// grid-stride share into PARTIALS[block], one more block folds them into
// PARTIALS[kNormBlocks]; blocks until those 8 bytes are on the host. PARTIALS holds
// kNormBlocks + 1 device doubles.
double sum_squares(const float* x, size_t n, double* partials);

// The passes of a step the device decides (core/step_math.h), queued without waiting; CARRY,
// STEP and OUT are device memory.
// grads *= float(1 / carry->scaler.scale) (skipped when it is 1); step->bad = 1 on an inf/NaN.
void unscale_and_flag(float* grads, size_t n, const StepCarry* carry, DeferredStep* step);
// *OUT = sum_squares's value, folded into OUT instead of PARTIALS[kNormBlocks].
void sum_squares_into(const float* x, size_t n, double* partials, double* out);
// decide_step(RULE, *CARRY, *STEP) in one thread.
void decide(const StepRule& rule, StepCarry* carry, DeferredStep* step);
// adamw_update with STEP's scalars (decay STEP->decay where DECAYS) where STEP->applied.
void adamw_update_if_applied(float* params, const float* grads, float* m, float* v, size_t n,
                             const DeferredStep* step, bool decays);

// 1-bit Adam's passes (core/runtime.h's onebit_momentum and onebit_update), queued without
// waiting. m[0, n) = onebit_local_momentum(m, grads, beta1, grad_scale).
void onebit_momentum(float* m, const float* grads, size_t n, float beta1, float grad_scale);
// params[0, n) by onebit_param_element with DECAY; m, worker_error and server_error set to 0
// where v is not onebit_live.
void onebit_update(float* params, float* m, const float* v, float* worker_error,
                   float* server_error, size_t n, const OneBitStep& step, float decay);

}  // namespace ringstep::cuda
