// AdamW (Loshchilov & Hutter 2019): bias-corrected moments, decoupled weight decay applied
// only to tensors the registry marks `decay` (not LayerNorm weights, not biases). Moments
// are fp32 flat buffers laid out by the parameters' registry, on the device of the
// parameters. On the CPU the update runs on the compute thread pool over fixed chunks of
// each tensor; it is elementwise, so the result does not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/registry.h"

namespace ringstep {

struct AdamWParams {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  // Moments on DEVICE (InputError where require_device refuses it).
  AdamW(const Registry& reg, const AdamWParams& hp, Device device = Device::cpu);
  // One update: grads are multiplied by GRAD_SCALE first (unscaling and clipping in one
  // factor), then params -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * params). Runs on the
  // moments' device (optim/device_passes.h for cuda); PARAMS and GRADS must live there too
  // (std::logic_error otherwise).
  void step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale);
  // The same update on host arrays laid out by the registry (moments on the CPU).
  void step(float* params, const float* grads, double lr, double grad_scale);
  int64_t step_count() const { return t_; }
  void set_step_count(int64_t t) { t_ = t; }
  FlatBuffer& m() { return m_; }
  FlatBuffer& v() { return v_; }
  const FlatBuffer& m() const { return m_; }
  const FlatBuffer& v() const { return v_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }

 private:
  // A span of one tensor: the unit of parallel work.
  struct Chunk {
    size_t offset, numel;
    bool decay;
  };
  static constexpr size_t kChunk = 16384;

  const Registry& reg_;
  AdamWParams hp_;
  std::vector<Chunk> chunks_;
  FlatBuffer m_, v_;
  int64_t t_ = 0;
};

}  // namespace ringstep
