#include "core/runtime.h"

#include <array>
#include <mutex>

#include "core/cpu/cpu_runtime.h"
#include "core/cuda/device_runtime.h"  // plain C++; defined only in CUDA builds
#include "core/error.h"

namespace ringstep {
namespace {

// The runtime of DEVICE, or the reason this build or machine has none.
std::unique_ptr<Runtime> make_runtime(Device device, std::string& why) {
  if (device == Device::cpu) return cpu::make_cpu_runtime();
#ifdef RINGSTEP_HAVE_CUDA
  return cuda::make_cuda_runtime(why);
#else
  why = "built without the CUDA backend";
  return nullptr;
#endif
}

// A copy already done.
struct CopyDone final : CopyInFlight {
  void wait() override {}
};

}  // namespace

std::shared_ptr<CopyInFlight> Runtime::copy_to_host_async(void* host, const void* src,
                                                          size_t bytes) {
  copy(host, src, bytes);
  return std::make_shared<CopyDone>();
}

std::shared_ptr<CopyInFlight> Runtime::copy_to_device_async(void* dst, const void* host,
                                                            size_t bytes) {
  copy(dst, host, bytes);
  return std::make_shared<CopyDone>();
}

std::shared_ptr<CopyInFlight> Runtime::upload(void* dst, const void* host, size_t bytes) {
  copy(dst, host, bytes);
  return std::make_shared<CopyDone>();
}

void Runtime::unscale_and_flag(float* x, size_t n, const StepCarry* carry, DeferredStep* step) {
  if (unscale_and_check(x, n, static_cast<float>(1.0 / carry->scaler.scale))) step->bad = 1;
}

void Runtime::sum_squares_into(const float* x, size_t n, double* out) { *out = sum_squares(x, n); }

void Runtime::decide(const StepRule& rule, StepCarry* carry, DeferredStep* step) {
  decide_step(rule, *carry, *step);
}

void Runtime::adamw_update_if_applied(const std::vector<TensorInfo>& tensors,
                                      const DeferredStep* step, float* params, const float* grads,
                                      float* m, float* v) {
  if (step->applied) adamw_update(tensors, step->adam, step->decay, params, grads, m, v);
}

Runtime& runtime(Device device, const char* what) {
  struct Slot {
    std::once_flag once;
    std::unique_ptr<Runtime> rt;
    std::string why;
  };
  static std::array<Slot, enum_names(Device{}).size()> slots;
  Slot& s = slots[static_cast<size_t>(device)];
  std::call_once(s.once, [&] { s.rt = make_runtime(device, s.why); });
  if (!s.rt)
    throw InputError(std::string(what) + ": device " + name(device) +
                     " is not available: " + s.why);
  return *s.rt;
}

}  // namespace ringstep
