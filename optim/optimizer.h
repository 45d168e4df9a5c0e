// The seam between the training loop and an optimizer (docs/design.md, "Optimizers"). Per
// step the trainer asks wants_allreduce(): true, and it averages the gradients over ranks
// (the bucketed AllReduce under backward) before step(); false, and each rank keeps its own
// gradients and the optimizer exchanges what it needs through the Reducer (a compressed
// optimizer's own exchange), which it may begin under backward (begin_under_backward). A
// step found bad (inf/NaN) is skip()ped and leaves the state as it was. A checkpoint saves
// what state_tensors() lists. make_optimizer is the one place that names optimizers.
// Not thread-safe; one instance per rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/enum_names.h"
#include "core/registry.h"
#include "core/step_math.h"
#include "optim/compress_choice.h"
#include "optim/reducer.h"

namespace ringstep {

// The stage of a compressed optimizer's next step: warm-up (full-precision, gradients
// averaged), compressed (its own 1-bit exchange), and for 0/1 Adam after its variance froze
// sync (a 1-bit exchange of the steps since the last one) or local (no exchange). Step
// records and the report show it.
enum class OneBitStage : uint8_t { warmup, compressed, sync, local };
constexpr auto enum_names(OneBitStage) {
  return std::to_array<EnumName<OneBitStage>>({{OneBitStage::warmup, "warmup"},
                                               {OneBitStage::compressed, "compressed"},
                                               {OneBitStage::sync, "sync"},
                                               {OneBitStage::local, "local"}});
}

// One buffer of an optimizer's state as a checkpoint stores it (docs/formats.md): a
// replicated buffer (the same bits on every rank) as NAME.bin, written by rank 0; per-rank
// buffers as NAME-rank-R.bin, each rank its own, the buffers of one NAME concatenated in
// the order listed.
struct StateTensor {
  std::string name;
  FlatBuffer* buffer = nullptr;
  bool per_rank = false;
  bool optional = false;  // absent from older checkpoints: then left as constructed
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Whether the next step's gradients reach step() averaged over the WORLD ranks.
  virtual bool wants_allreduce(int world) const = 0;
  // The next step's stage for a compressed optimizer (the step record's `stage`); nullopt
  // for one that never compresses.
  virtual std::optional<OneBitStage> stage(int world) const = 0;
  // Called before backward on a step where wants_allreduce is false: begins the optimizer's
  // exchange through REDUCER, which then reads each part of GRADS (multiplied by GRAD_SCALE:
  // the loss scale's inverse times the previous step's clip coefficient) as backward reports
  // it ready. Returns false when the optimizer exchanges after backward instead (step()
  // then does all of it).
  virtual bool begin_under_backward(const float* grads, double grad_scale, Reducer& reducer) = 0;
  // One update with GRADS multiplied by GRAD_SCALE (unscaled and clipped; ignored for the
  // part of the exchange begun under backward), collective through REDUCER where the
  // optimizer exchanges. Returns what its exchange did on this rank ({} without one).
  virtual SignExchange step(FlatBuffer& params, const FlatBuffer& grads, double lr,
                            double grad_scale, Reducer& reducer) = 0;
  // The step found bad on some rank: completes an exchange begun under backward (a
  // collective) and leaves every state buffer and the step count as they were.
  virtual SignExchange skip(Reducer& reducer) = 0;

  // An optimizer whose update a runtime can decide and apply by itself (core/step_math.h),
  // so that a lone rank's step never waits for the host: fills RULE's optimizer part and
  // returns true. False (the default): its steps need the host.
  virtual bool fill_deferred_rule(StepRule& /*rule*/) const { return false; }
  // The update of a step decided in the runtime's memory (DECIDED, there): nothing where it
  // was not applied. The step count is left alone: the trainer sets it when it reads the
  // runtime's carry. Only where fill_deferred_rule returned true.
  virtual void step_deferred(FlatBuffer& params, const FlatBuffer& grads,
                             const DeferredStep* decided);

  // Applied steps (the bias corrections' t; skipped steps do not count).
  virtual int64_t step_count() const = 0;
  virtual void set_step_count(int64_t t) = 0;
  // The buffers a checkpoint saves and a resume restores, in a fixed order.
  virtual std::vector<StateTensor> state_tensors() = 0;
  // After a resume whose checkpoint was saved by SAVED_WORLD ranks (not this run's WORLD):
  // the per-rank buffers were read from those ranks' files, SAVED[r] holding old rank r's,
  // laid out as state_tensors() lists them; the optimizer keeps what they held in a form
  // valid on WORLD ranks. The default has no per-rank state.
  virtual void adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved,
                                  int saved_world, int world);
  // Whether every rank holds the same parameters after the last step (false between 0/1
  // Adam's syncs: its local steps; the trainer checks replicas only when true).
  virtual bool replicas_agree() const { return true; }
  // After a resume restored state_tensors() and the step count: sets PARAMS (read from the
  // checkpoint's one copy, rank 0's) to this rank's own where they differ per rank.
  virtual void restore_params(FlatBuffer& /*params*/) {}
  // Bytes of state_tensors() and any scratch the optimizer holds.
  virtual size_t state_bytes() const = 0;
  // A line for the run's log about a choice the optimizer made in the last step (1-bit
  // Adam's compress: auto), once; "" when there is none. The same on every rank.
  virtual std::string take_note() { return ""; }
  // compress: auto's decision once made, with the numbers it compared, for the run's
  // summary; nullopt for an optimizer without one. The same on every rank.
  virtual std::optional<CompressChoice> compress_choice() const { return std::nullopt; }
};

// The optimizer CFG.optimizer names, its state on CFG.run.device, laid out by REG (which
// must outlive it). MAY_SKIP: a step can be skipped after its gradients were formed (loss
// scaling, or train.on_nan: skip), so an exchange begun under backward must be undoable.
std::unique_ptr<Optimizer> make_optimizer(const Registry& reg, const Config& cfg, bool may_skip);

}  // namespace ringstep
