#include <cuda_runtime_api.h>

#include "core/cuda/cuda_backend.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/cuda/device_runtime.h"
#include "core/cuda/event_clock.h"
#include "core/cuda/gpu_peak.h"
#include "core/cuda/optim_cuda.h"
#include "core/registry.h"

namespace ringstep::cuda {
namespace {

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() : name_(cuda_device_name()) {
    // The norm's kNormBlocks partial sums, its total, then the inf/NaN flag: made once, so
    // that no pass allocates inside a step.
    scratch_ = static_cast<double*>(device_alloc((kNormBlocks + 1) * sizeof(double) + sizeof(int)));
  }
  ~CudaRuntime() override { device_free(scratch_); }

  Device device() const override { return Device::cuda; }
  std::string device_name() const override { return name_; }
  bool host_memory() const override { return false; }

  void* alloc(size_t bytes) override {
    void* p = device_alloc(bytes);
    device_memset_zero(p, bytes);
    return p;
  }
  void free(void* p) noexcept override { device_free(p); }
  void zero(void* p, size_t bytes) override { device_memset_zero(p, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  DeviceMemory memory() const override {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }

  std::unique_ptr<Backend> make_backend(DType act_dtype, bool tf32) override {
    return make_cuda_backend(act_dtype, tf32);
  }
  std::unique_ptr<DeviceClock> make_clock(size_t capacity) override {
    return make_event_clock(capacity);
  }
  Peak peak(DType act_dtype, bool tf32, int) override {
    return {gpu_peak_gflops(name_, act_dtype, tf32),
            name_ + ": " + gpu_peak_source(name_, act_dtype, tf32)};
  }

  double sum_squares(const float* x, size_t n) override {
    return cuda::sum_squares(x, n, scratch_);
  }
  bool unscale_and_check(float* x, size_t n, float inv_scale) override {
    return cuda::unscale_and_check(x, n, inv_scale,
                                   reinterpret_cast<int*>(scratch_ + kNormBlocks + 1));
  }
  void adamw_update(const std::vector<TensorInfo>& tensors, const AdamWStep& s, float decay,
                    float* params, const float* grads, float* m, float* v) override {
    for (const TensorInfo& t : tensors)
      cuda::adamw_update(params + t.offset, grads + t.offset, m + t.offset, v + t.offset, t.numel,
                         s, t.decay ? decay : 0.0f);
  }

 private:
  std::string name_;
  double* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime(std::string& why) {
  if (!cuda_available()) {
    why = "no CUDA device or driver is usable on this machine";
    return nullptr;
  }
  use_local_device();
  return std::make_unique<CudaRuntime>();
}

}  // namespace ringstep::cuda
