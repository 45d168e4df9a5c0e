// A Runtime for tests whose memory says it is not the host's (host_memory() false), so that
// code takes its device paths, but which is host memory underneath: every operation runs the
// CPU runtime's. Tests derive from it to watch or defer what a device runtime is asked
// (copies, uploads, pins) on a machine without a GPU.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/runtime.h"

namespace ringstep::testing {

class HostBackedRuntime : public Runtime {
 public:
  explicit HostBackedRuntime(std::string name) : name_(std::move(name)) {}

  Device device() const override { return Device::cpu; }
  std::string device_name() const override { return name_; }
  bool host_memory() const override { return false; }
  void* alloc(size_t bytes) override { return cpu().alloc(bytes); }
  void free(void* p) noexcept override { cpu().free(p); }
  void zero(void* p, size_t bytes) override { cpu().zero(p, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { cpu().copy(dst, src, bytes); }
  DeviceMemory memory() const override { return cpu().memory(); }
  std::unique_ptr<Backend> make_backend(DType dt, bool tf32) override {
    return cpu().make_backend(dt, tf32);
  }
  std::unique_ptr<DeviceClock> make_clock(size_t) override { return nullptr; }
  Peak peak(DType, bool, int) override { return {}; }
  double sum_squares(const float* x, size_t n) override { return cpu().sum_squares(x, n); }
  bool unscale_and_check(float* x, size_t n, float inv) override {
    return cpu().unscale_and_check(x, n, inv);
  }
  void adamw_update(const std::vector<TensorInfo>& t, const AdamWStep& s, float decay, float* p,
                    const float* g, float* m, float* v) override {
    cpu().adamw_update(t, s, decay, p, g, m, v);
  }
  void onebit_momentum(float* m, const float* g, size_t begin, size_t end, float beta1,
                       float grad_scale) override {
    cpu().onebit_momentum(m, g, begin, end, beta1, grad_scale);
  }
  void onebit_update(const std::vector<TensorInfo>& t, size_t begin, size_t end,
                     const OneBitStep& s, float decay, float* p, float* m, const float* v,
                     float* ew, float* es) override {
    cpu().onebit_update(t, begin, end, s, decay, p, m, v, ew, es);
  }

 protected:
  static Runtime& cpu() { return runtime(Device::cpu); }

 private:
  std::string name_;
};

}  // namespace ringstep::testing
