// A runtime for tests that drives the model's device paths on the CPU: its memory says it
// is not the host's (host_memory() false), so Gpt uploads its tokens through it as on a GPU,
// but it is host memory underneath and the ops are the CPU backend's, which read what was
// uploaded. It records every upload and whether the host buffer an upload reads was reused
// before that upload was waited for.
//
// With cuda_state, its backend sizes attention's state as the cuda backend does
// (attention_state_bytes(Device::cuda, ...), what CudaBackend answers with): for counting
// passes only, as the CPU's attention cannot run on that state.
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/registry.h"
#include "core/host_backed_runtime.h"
#include "core/runtime.h"

namespace ringstep {

// The CPU backend, with attention's state sized as on cuda.
class CudaStateBackend final : public Backend {
 public:
  explicit CudaStateBackend(std::unique_ptr<Backend> cpu) : cpu_(std::move(cpu)) {}
  Device device() const override { return cpu_->device(); }
  DType act_dtype() const override { return cpu_->act_dtype(); }
  void set_weights(const float* p, size_t n) override { cpu_->set_weights(p, n); }
  size_t weight_copy_bytes(size_t n) const override { return cpu_->weight_copy_bytes(n); }
  void zero(float* x, size_t n, Arena& a) override { cpu_->zero(x, n, a); }
  void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, Arena& a) override {
    cpu_->encoder_forward(out, tokens, wte, wpe, B, T, C, a);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, Arena& a) override {
    cpu_->encoder_backward(dwte, dwpe, dout, tokens, B, T, C, a);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* w,
                         const float* b, int N, int C, Arena& a) override {
    cpu_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, a);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const void* inp,
                          const float* w, const float* mean, const float* rstd, int N, int C,
                          Arena& a) override {
    cpu_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, a);
  }
  void linear_forward(void* out, const void* inp, const float* w, const float* b,
                      const void* residual, int N, int C, int OC, Arena& a) override {
    cpu_->linear_forward(out, inp, w, b, residual, N, C, OC, a);
  }
  void linear_backward(float* dinp, float* dw, float* db, const float* dout, const void* inp,
                       const float* w, int N, int C, int OC, Arena& a) override {
    cpu_->linear_backward(dinp, dw, db, dout, inp, w, N, C, OC, a);
  }
  void logits_forward(float* logits, const void* inp, const float* wte, int N, int C, int V,
                      int vocab, Arena& a) override {
    cpu_->logits_forward(logits, inp, wte, N, C, V, vocab, a);
  }
  size_t attention_state_bytes(int B, int T, int NH) const override {
    return size_t(ringstep::attention_state_bytes(Device::cuda, act_dtype(), B, T, NH));
  }
  void attention_forward(void* out, void* state, const void* qkv, int B, int T, int C, int NH,
                         Arena& a) override {
    cpu_->attention_forward(out, state, qkv, B, T, C, NH, a);
  }
  void attention_backward(float* dqkv, const float* dout, const void* qkv, const void* out,
                          const void* state, int B, int T, int C, int NH, Arena& a) override {
    cpu_->attention_backward(dqkv, dout, qkv, out, state, B, T, C, NH, a);
  }
  void gelu_forward(void* out, const void* inp, int N, int C, Arena& a) override {
    cpu_->gelu_forward(out, inp, N, C, a);
  }
  void gelu_backward(float* d, const void* inp, int N, int C, Arena& a) override {
    cpu_->gelu_backward(d, inp, N, C, a);
  }
  void crossentropy_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V, double* loss_sum,
                            Arena& a) override {
    cpu_->crossentropy_forward(losses, probs, logits, targets, N, V, loss_sum, a);
  }
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                             const float* dloss, int N, int V, Arena& a) override {
    cpu_->crossentropy_backward(dlogits, probs, targets, dloss, N, V, a);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

class DeviceShapedRuntime final : public testing::HostBackedRuntime {
 public:
  explicit DeviceShapedRuntime(bool cuda_state = false)
      : HostBackedRuntime("device-shaped test memory"), cuda_state_(cuda_state) {}

  std::unique_ptr<Backend> make_backend(DType dt, bool tf32) override {
    auto be = HostBackedRuntime::make_backend(dt, tf32);
    if (!cuda_state_) return be;
    return std::make_unique<CudaStateBackend>(std::move(be));
  }
  void pin_host(void*, size_t) override { ++pins; }
  void unpin_host(void*) noexcept override { ++unpins; }

  // What upload() was asked, in order.
  struct Upload {
    const void* host;
    size_t bytes;
  };
  std::vector<Upload> uploads;
  int pins = 0, unpins = 0;
  int reused_before_wait = 0;  // uploads from a host buffer whose last upload was not waited

  // Copied at once (the ops queued after it read DST), but only "done" once waited for.
  std::shared_ptr<CopyInFlight> upload(void* dst, const void* host, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_ && last_host_ == host && !last_->waited) ++reused_before_wait;
    std::memcpy(dst, host, bytes);
    uploads.push_back({host, bytes});
    last_ = std::make_shared<Pending>();
    last_host_ = host;
    return last_;
  }

 private:
  struct Pending final : CopyInFlight {
    bool waited = false;
    void wait() override { waited = true; }
  };
  bool cuda_state_;
  std::mutex mu_;
  std::shared_ptr<Pending> last_;
  const void* last_host_ = nullptr;
};

}  // namespace ringstep
