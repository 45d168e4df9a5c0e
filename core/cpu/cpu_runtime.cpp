#include "core/cpu/cpu_runtime.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/aligned_alloc.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/optim_passes.h"
#include "core/cpu/peak.h"
#include "core/device_clock.h"

namespace ringstep::cpu {
namespace {

// MemAvailable from /proc/meminfo, in bytes; 0 where it cannot be read.
size_t available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

class CpuRuntime final : public Runtime {
 public:
  Device device() const override { return Device::cpu; }
  std::string device_name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  void* alloc(size_t bytes) override { return allocate_buffer(bytes); }
  void free(void* p) noexcept override { release_buffer(p); }
  void zero(void* p, size_t bytes) override {
    if (bytes) std::memset(p, 0, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  DeviceMemory memory() const override {
    return {available_bytes(), size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE))};
  }

  std::unique_ptr<Backend> make_backend(DType act_dtype, bool) override {
    return std::make_unique<CpuBackend>(act_dtype);
  }
  std::unique_ptr<DeviceClock> make_clock(size_t) override { return nullptr; }
  Peak peak(DType act_dtype, bool, int threads) override {
    return {measure_matmul_peak_gflops(act_dtype, 2048, 5, threads) * threads,
            "measured: 1-thread " + matmul_peak_kernel(act_dtype) + " x threads"};
  }

  double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n); }
  bool unscale_and_check(float* x, size_t n, float inv_scale) override {
    return cpu::unscale_and_check(x, n, inv_scale);
  }
  void adamw_update(const std::vector<TensorInfo>& tensors, const AdamWStep& s, float decay,
                    float* params, const float* grads, float* m, float* v) override {
    cpu::adamw_update(tensors, s, decay, params, grads, m, v);
  }
  void onebit_momentum(float* m, const float* grads, size_t begin, size_t end, float beta1,
                       float grad_scale) override {
    cpu::onebit_momentum(m, grads, begin, end, beta1, grad_scale);
  }
  void onebit_update(const std::vector<TensorInfo>& tensors, size_t begin, size_t end,
                     const OneBitStep& s, float decay, float* params, float* m, const float* v,
                     float* worker_error, float* server_error) override {
    cpu::onebit_update(tensors, begin, end, s, decay, params, m, v, worker_error, server_error);
  }
};

}  // namespace

std::unique_ptr<Runtime> make_cpu_runtime() { return std::make_unique<CpuRuntime>(); }

}  // namespace ringstep::cpu
