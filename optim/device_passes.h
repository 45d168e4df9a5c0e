// The optimizer side's passes over whole flat buffers, run where the buffers live: the host
// loops of optim/ (clip.cpp, loss_scaler.cpp, adamw.cpp) for Device::cpu, the kernels of
// core/cuda/optim_cuda.h for Device::cuda. The one file in optim/ that knows CUDA; callers
// hand it FlatBuffers and never branch on the device. Results are the same up to summation
// order (docs/gpu.md).
//
// A DevicePasses owns the few bytes of device memory its reductions write their result to
// (the norm's partial sums, the inf/NaN flag), allocated once at construction (nothing on
// the CPU), so that no pass allocates inside a step. sum_squares and unscale_and_check block
// until their scalar is on the host; adamw_update only enqueues. Not thread-safe.
#pragma once

#include <cstdint>

#include "core/device.h"
#include "core/registry.h"

namespace ringstep {

struct AdamWParams;

class DevicePasses {
 public:
  // InputError where require_device refuses DEVICE.
  explicit DevicePasses(Device device);
  ~DevicePasses();
  DevicePasses(const DevicePasses&) = delete;
  DevicePasses& operator=(const DevicePasses&) = delete;

  Device device() const { return device_; }
  // The sum over X of x^2, in double (optim/clip.h's sum_squares on the host).
  double sum_squares(const FlatBuffer& x);
  // X *= INV_SCALE (skipped when it is 1), then whether any element is inf or NaN
  // (LossScaler::unscale_and_check).
  bool unscale_and_check(FlatBuffer& x, float inv_scale);

 private:
  void check_device(const FlatBuffer& x, const char* pass) const;

  Device device_;
  void* scratch_ = nullptr;  // cuda: kNormBlocks + 1 doubles, then the flag
};

// AdamW's step T (1-based) on device buffers, tensor by tensor as AdamW::step does on the
// host (optim/adamw.h): PARAMS, GRADS, M and V all on cuda, laid out by REG. Enqueued only.
void adamw_on_device(const Registry& reg, const AdamWParams& hp, int64_t t, double lr,
                     double grad_scale, FlatBuffer& params, const FlatBuffer& grads, FlatBuffer& m,
                     FlatBuffer& v);

}  // namespace ringstep
