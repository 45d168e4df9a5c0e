// 1-bit Adam (Tang et al. 2021, arXiv 2102.02888; DeepSpeed's OnebitAdam), docs/optim.md.
// The moments and Adam's step count are an AdamW's (optim/adamw.h) that this class owns, so
// that the warm-up is AdamW itself and a checkpoint saves them as AdamW's; this class adds
// the compression stage and its error buffers.
//
// Warm-up (Adam's step count < freeze_step, or one rank): gradients averaged, AdamW's step.
// Compression stage: v is frozen (with its bias correction at freeze_step); each rank
// updates its momentum from its own gradient,
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
#include "optim/compress_choice.h"
#include "optim/optimizer.h"
#include "optim/reducer.h"

namespace ringstep {

struct OneBitParams {
  int freeze_step = 60;  // AdamW steps (applied) before the variance freezes; >= 1
  OneBitScale scale = OneBitScale::mean_abs;
  int scale_block = 0;  // elements per scale inside a tensor (Reducer's SignCode); 0 = per tensor
  // Begin the exchange under backward (begin_under_backward), clipped by the previous step's
  // coefficient; false: the whole exchange in step(), after backward.
  bool under_backward = false;
  // A step begun under backward may be skipped (loss scaling, or train.on_nan: skip): keep
  // what each part held before it was sent, so that skip() can put it back.
  bool may_skip = false;
  // always; never (AdamW throughout); auto: decided at the end of the warm-up (decide_compress).
  OneBitCompress compress = OneBitCompress::always;
};

class OneBitAdam final : public Optimizer {
 public:
  // State on DEVICE: the moments, both error buffers and may_skip's kept copies in its
  // runtime's memory (the compress: auto decision on the host); the per-element work is the
  // runtime's onebit_* passes. On a device, the reducer must read BUF (a device path:
  // Reducer::takes_input false).
  OneBitAdam(const Registry& reg, const AdamWParams& hp, const OneBitParams& ob,
             Device device = Device::cpu);
  // State in RT's memory (a test's own runtime).
  OneBitAdam(const Registry& reg, const AdamWParams& hp, const OneBitParams& ob, Runtime& rt);

  // Optimizer. The stage of the next step on WORLD ranks: compressed once freeze_step steps
  // have been applied, and never with one rank (nothing to compress).
  bool wants_allreduce(int world) const override { return *stage(world) == OneBitStage::warmup; }
  std::optional<OneBitStage> stage(int world) const override;
  // Compression stage with under_backward: each part's momentum is formed (from GRADS times
  // GRAD_SCALE) and sent as backward finishes it.
  bool begin_under_backward(const float* grads, double grad_scale, Reducer& reducer) override;
  // Warm-up: AdamW's step. Compression stage: finishes the exchange begun under backward, or
  // runs compressed_step. Every rank ends with the same m and params.
  SignExchange step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale,
                    Reducer& reducer) override;
  // Completes an exchange begun under backward without an update, and restores m and both
  // error buffers to what they held before the step (may_skip; without it they hold that
  // step's values).
  SignExchange skip(Reducer& reducer) override;
  int64_t step_count() const override { return adam_.step_count(); }
  void set_step_count(int64_t t) override { adam_.set_step_count(t); }
  // AdamW's, then "onebit" per rank: the worker error buffer, then the server's.
  std::vector<StateTensor> state_tensors() override;
  // Keeps the compressed mean's error (docs/optim.md, "Resuming on another world size"): every
  // new rank's worker error is the old ranks' mean worker error plus the whole server error
  // (each old rank's server buffer holds its own chunks and zeros elsewhere, so their sum is
  // the whole), and the server errors start at 0: mean_r e_w + e_s is what it was.
  void adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved, int saved_world,
                          int world) override;
  size_t state_bytes() const override;
  std::string take_note() override;

  // One compression-stage step on this rank's own (not averaged) gradients, multiplied by
  // GRAD_SCALE first; collective through REDUCER. Each part the reducer hands over gets its
  // momentum just before it is sent and its update as soon as its mean is back, so the
  // arithmetic of one part overlaps another's exchange.
  SignExchange compressed_step(float* params, const float* grads, double lr, double grad_scale,
                               Reducer& reducer);

  // compress: auto's decision, once made (nullopt before, and for always and never).
  std::optional<bool> compressing() const;
  // The same decision with the numbers it compared (nullopt where compressing() is, and
  // after a resume from a checkpoint written before they were saved).
  std::optional<CompressChoice> compress_choice() const override;

  AdamW& adam() { return adam_; }
  const AdamW& adam() const { return adam_; }
  FlatBuffer& worker_error() { return worker_error_; }
  FlatBuffer& server_error() { return server_error_; }
  const FlatBuffer& worker_error() const { return worker_error_; }
  const FlatBuffer& server_error() const { return server_error_; }
  void reset_errors();
  const OneBitParams& params() const { return ob_; }

 private:
  // The public constructors' common part, with ADAM made on the state's runtime.
  OneBitAdam(AdamW adam, const Registry& reg, const AdamWParams& hp, const OneBitParams& ob);
  void begin_exchange(const float* grads, float grad_scale, Reducer& reducer);
  // compress: auto, after a warm-up step: keeps its exchange's cost and, at the last one,
  // decides (a collective: the measurements are averaged over ranks).
  void observe_warmup(Reducer& reducer);
  // z[0, end - begin) += this rank's momentum b1 m + (1 - b1) g GRAD_SCALE over elements
  // [begin, end) (the reducer's input, formed where it is coded; host memory).
  void add_local_momentum(const float* grads, float grad_scale, size_t begin, size_t end,
                          float* z) const;
  // The update of elements [begin, end), the part of the vector the reducer hands over.
  void apply(float* params, double lr, size_t begin, size_t end);

  AdamW adam_;
  const Registry& reg_;
  AdamWParams hp_;
  OneBitParams ob_;
  Runtime& rt_;  // where the state lives and its passes run
  FlatBuffer worker_error_, server_error_;
  // may_skip: the worker and server errors as they were before the step in flight, and m
  // where the reducer reads BUF (the momentum is then formed into m before it is sent; made
  // at the first such step); with an INPUT, m is not written until the mean is decoded.
  FlatBuffer kept_worker_, kept_server_, kept_m_;
  bool in_flight_ = false;  // an exchange begun under backward awaits step() or skip()
  // compress: auto: the decision (one float: 0 undecided, 1 compress, -1 not) and the
  // numbers it compared (CompressChoice's, in its order; from_step 0: not saved), both
  // checkpointed, and the warm-up's measurements since this process started.
  FlatBuffer choice_, choice_costs_;
  std::vector<ExchangeCost> warmup_costs_;
  std::string note_;
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
