// 1-bit Adam (Tang et al. 2021, arXiv 2102.02888; DeepSpeed's OnebitAdam), docs/optim.md.
// The moments and Adam's step count are AdamW's (optim/adamw.h), so that the warm-up is
// AdamW itself and a checkpoint saves them as for AdamW; this class adds the compression
// stage and its error buffers.
//
// Warm-up (AdamW's step count < freeze_step, or one rank): the caller averages gradients
// and calls AdamW::step. Compression stage: v is frozen (with its bias correction at
// freeze_step); each rank updates its momentum from its own gradient,
//   m = b1 m + (1 - b1) g,
// the momenta are averaged by the Reducer's sign_average (1 bit per element, worker and
// server error feedback), and
//   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^T)) + eps) + wd p)      (T = freeze_step)
// with wd only on tensors the registry marks decay. Where the frozen v is 0 (a coordinate
// that never had a gradient in the warm-up) the momentum and both error buffers are held at
// 0 and there is no momentum step (never a +-scale/eps jump); decay still applies.
// Not thread-safe; one instance per rank.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/registry.h"
#include "optim/adamw.h"
#include "optim/reducer.h"

namespace ringstep {

enum class OneBitStage : uint8_t { warmup, compressed };
constexpr auto enum_names(OneBitStage) {
  return std::to_array<EnumName<OneBitStage>>(
      {{OneBitStage::warmup, "warmup"}, {OneBitStage::compressed, "compressed"}});
}

struct OneBitParams {
  int freeze_step = 60;  // AdamW steps (applied) before the variance freezes; >= 1
  OneBitScale scale = OneBitScale::mean_abs;
  int scale_block = 0;  // elements per scale inside a tensor (Reducer's SignCode); 0 = per tensor
};

class OneBitAdam {
 public:
  // ADAM holds the moments and the step count and must outlive this object.
  OneBitAdam(AdamW& adam, const Registry& reg, const AdamWParams& hp, const OneBitParams& ob);

  // The stage of the next step on WORLD ranks: compressed once freeze_step steps have been
  // applied, and never with one rank (nothing to compress).
  OneBitStage stage(int world) const;
  // One compression-stage step on this rank's own (not averaged) gradients, multiplied by
  // GRAD_SCALE first; collective through REDUCER. Every rank ends with the same m and params.
  // Each part the reducer hands over gets its momentum just before it is sent and its update
  // as soon as its mean is back, so the arithmetic of one part overlaps another's exchange.
  SignExchange compressed_step(float* params, const float* grads, double lr, double grad_scale,
                               Reducer& reducer);
  // compressed_step in two halves around backward, so that the exchange runs under it
  // (optimizer.onebit.overlap): begin before backward, after which the reducer reads each
  // part of GRADS once it reports the part ready; finish after it. abandon instead of
  // finish completes the collective without an update, for a step found bad after its
  // momenta were sent: m and both error buffers then hold that step's values.
  void begin_compressed_step(const float* grads, double grad_scale, Reducer& reducer);
  SignExchange finish_compressed_step(float* params, double lr, Reducer& reducer);
  SignExchange abandon_compressed_step(Reducer& reducer);

  FlatBuffer& worker_error() { return worker_error_; }
  FlatBuffer& server_error() { return server_error_; }
  const FlatBuffer& worker_error() const { return worker_error_; }
  const FlatBuffer& server_error() const { return server_error_; }
  void reset_errors();
  size_t state_bytes() const { return worker_error_.bytes() + server_error_.bytes(); }
  const OneBitParams& params() const { return ob_; }

 private:
  // Both work on elements [begin, end), the part of the vector the reducer hands over.
  void local_momentum(const float* grads, float grad_scale, size_t begin, size_t end);
  void apply(float* params, double lr, size_t begin, size_t end);

  AdamW& adam_;
  const Registry& reg_;
  AdamWParams hp_;
  OneBitParams ob_;
  FlatBuffer worker_error_, server_error_;
};

}  // namespace ringstep

namespace ringstep {

// What a 1-bit Adam config on WORLD ranks will not do as asked, or does at a known cost, in
// one line: one rank (nothing to compress: plain Adam), freeze_step >= train.steps (the
// variance never freezes: plain Adam), beta2 < kOneBitMinBeta2 (the frozen variance is a
// short average; docs/optim.md); "" when there is nothing to say or the optimizer is AdamW.
inline constexpr double kOneBitMinBeta2 = 0.99;
std::string onebit_warning(const Config& cfg, int world);

}  // namespace ringstep
