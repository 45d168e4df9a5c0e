#include <cuda_runtime_api.h>

#include <algorithm>

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

// A copy on a side stream: done when its event is.
class CudaCopy final : public CopyInFlight {
 public:
  CudaCopy(int device, cudaEvent_t done) : device_(device), done_(done) {}
  ~CudaCopy() override { cudaEventDestroy(done_); }
  void wait() override {
    CUDA_CHECK(cudaSetDevice(device_));  // the calling thread may be the comm engine's
    CUDA_CHECK(cudaEventSynchronize(done_));
  }

 private:
  int device_;
  cudaEvent_t done_;
};

class CudaRuntime final : public Runtime {
 public:
  CudaRuntime() : name_(cuda_device_name()) {
    // The norm's kNormBlocks partial sums, its total, then the inf/NaN flag: made once, so
    // that no pass allocates inside a step.
    scratch_ = static_cast<double*>(device_alloc((kNormBlocks + 1) * sizeof(double) + sizeof(int)));
    CUDA_CHECK(cudaGetDevice(&device_));
    // Non-blocking: the legacy default stream, the backend's compute stream, does not wait
    // for them, nor they for it unless told. One per direction, so that a bucket copied back
    // never queues behind one still waiting for backward.
    CUDA_CHECK(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking));
  }
  ~CudaRuntime() override {
    cudaStreamDestroy(to_host_);
    cudaStreamDestroy(to_device_);
    device_free(scratch_);
  }

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
  std::shared_ptr<CopyInFlight> copy_to_host_async(void* host, const void* src,
                                                   size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t ready;  // everything this thread has queued on the compute stream so far
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, nullptr));
    CUDA_CHECK(cudaStreamWaitEvent(to_host_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait is satisfied
    CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, to_host_));
    return done_on(to_host_);
  }
  std::shared_ptr<CopyInFlight> copy_to_device_async(void* dst, const void* host,
                                                     size_t bytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, to_device_));
    return done_on(to_device_);
  }
  std::shared_ptr<CopyInFlight> upload(void* dst, const void* host, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, nullptr));
    return done_on(nullptr);  // the legacy default stream: the backend's compute stream
  }
  void pin_host(void* p, size_t bytes) override {
    CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
  }
  void unpin_host(void* p) noexcept override { cudaHostUnregister(p); }

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
  void onebit_momentum(float* m, const float* grads, size_t begin, size_t end, float beta1,
                       float grad_scale) override {
    cuda::onebit_momentum(m + begin, grads + begin, end - begin, beta1, grad_scale);
  }
  void onebit_update(const std::vector<TensorInfo>& tensors, size_t begin, size_t end,
                     const OneBitStep& s, float decay, float* params, float* m, const float* v,
                     float* worker_error, float* server_error) override {
    for (const TensorInfo& t : tensors) {
      const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (lo >= hi) continue;
      cuda::onebit_update(params + lo, m + lo, v + lo, worker_error + lo, server_error + lo,
                          hi - lo, s, t.decay ? decay : 0.0f);
    }
  }
  void unscale_and_flag(float* x, size_t n, const StepCarry* carry, DeferredStep* step) override {
    cuda::unscale_and_flag(x, n, carry, step);
  }
  void sum_squares_into(const float* x, size_t n, double* out) override {
    cuda::sum_squares_into(x, n, scratch_, out);
  }
  void decide(const StepRule& rule, StepCarry* carry, DeferredStep* step) override {
    cuda::decide(rule, carry, step);
  }
  void adamw_update_if_applied(const std::vector<TensorInfo>& tensors, const DeferredStep* step,
                               float* params, const float* grads, float* m, float* v) override {
    for (const TensorInfo& t : tensors)
      cuda::adamw_update_if_applied(params + t.offset, grads + t.offset, m + t.offset, v + t.offset,
                                    t.numel, step, t.decay);
  }

 private:
  // An event recorded on STREAM after what was just queued there.
  std::shared_ptr<CopyInFlight> done_on(cudaStream_t stream) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, stream));
    return std::make_shared<CudaCopy>(device_, done);
  }

  std::string name_;
  double* scratch_ = nullptr;
  int device_ = 0;
  cudaStream_t to_host_ = nullptr, to_device_ = nullptr;
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
