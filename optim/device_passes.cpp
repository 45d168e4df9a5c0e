#include "optim/device_passes.h"

#include <stdexcept>
#include <string>

#include "core/cuda/device.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"

#ifdef RINGSTEP_HAVE_CUDA
#include "core/cuda/optim_cuda.h"
#endif

namespace ringstep {

#ifdef RINGSTEP_HAVE_CUDA
namespace {
constexpr size_t kFlagOffset = (cuda::kNormBlocks + 1) * sizeof(double);
}  // namespace
#endif

DevicePasses::DevicePasses(Device device) : device_(device) {
  require_device(device, "optimizer passes");
#ifdef RINGSTEP_HAVE_CUDA
  if (device == Device::cuda) scratch_ = cuda::device_alloc(kFlagOffset + sizeof(int));
#endif
}

DevicePasses::~DevicePasses() {
#ifdef RINGSTEP_HAVE_CUDA
  cuda::device_free(scratch_);
#endif
}

void DevicePasses::check_device(const FlatBuffer& x, const char* pass) const {
  if (x.device() != device_)
    throw std::logic_error(std::string(pass) + ": a " + name(x.device()) +
                           " buffer handed to the passes of device " + name(device_));
}

double DevicePasses::sum_squares(const FlatBuffer& x) {
  check_device(x, "sum_squares");
#ifdef RINGSTEP_HAVE_CUDA
  if (device_ == Device::cuda)
    return cuda::sum_squares(x.data(), x.size(), static_cast<double*>(scratch_));
#endif
  return ringstep::sum_squares(x.data(), x.size());
}

bool DevicePasses::unscale_and_check(FlatBuffer& x, float inv_scale) {
  check_device(x, "unscale_and_check");
#ifdef RINGSTEP_HAVE_CUDA
  if (device_ == Device::cuda)
    return cuda::unscale_and_check(
        x.data(), x.size(), inv_scale,
        reinterpret_cast<int*>(static_cast<char*>(scratch_) + kFlagOffset));
#endif
  return unscale_and_check_host(x.data(), x.size(), inv_scale);
}

void adamw_on_device(const Registry& reg, const AdamWParams& hp, int64_t t, double lr,
                     double grad_scale, FlatBuffer& params, const FlatBuffer& grads, FlatBuffer& m,
                     FlatBuffer& v) {
#ifdef RINGSTEP_HAVE_CUDA
  const cuda::AdamWStep s = cuda::adamw_scalars(hp.beta1, hp.beta2, hp.eps, lr, t, grad_scale);
  for (const TensorInfo& ti : reg.tensors())
    cuda::adamw_update(params.at(ti), grads.at(ti), m.at(ti), v.at(ti), ti.numel, s,
                       ti.decay ? float(lr * hp.weight_decay) : 0.0f);
#else
  throw std::logic_error("adamw_on_device: built without the CUDA backend");
#endif
}

}  // namespace ringstep
