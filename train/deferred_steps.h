// Steps a runtime decides by itself (core/step_math.h): where one rank trains alone with an
// optimizer that can apply a decided update (Optimizer::fill_deferred_rule), every step's
// loss, inf/NaN check, norm, loss-scale decision, LR and update stay in the runtime's
// memory, and the host reads the records of the steps since its last read all at once,
// when it reads the device's phase times (once per log interval). So a GPU's step never
// waits for the host. The CPU runs the same code (its reads are copies in host memory), and
// the one-rank goldens hold it to the host's own sequence, bit for bit.
// Memory: one StepCarry, then SLOTS DeferredSteps, in the runtime's memory. Not
// thread-safe; the training thread's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/runtime.h"
#include "core/step_math.h"

namespace ringstep {

class DeferredSteps {
 public:
  // SLOTS: the most steps run between two reads.
  DeferredSteps(Runtime& rt, const StepRule& rule, int slots);
  ~DeferredSteps();
  DeferredSteps(const DeferredSteps&) = delete;
  DeferredSteps& operator=(const DeferredSteps&) = delete;

  const StepRule& rule() const { return rule_; }
  // Sets the carry from the host's state (a fresh start or a resumed checkpoint): the loss
  // scaler's, and T applied optimizer steps. Blocks until it is in place.
  void load(const LossScalerState& scaler, int64_t t);
  // Step I since the last read (I < slots) begins: its record, zeroed in the runtime.
  DeferredStep* begin(int i);
  StepCarry* carry() { return carry_; }
  // The next backward's seed, float(scale / grad_accum_steps), in the runtime's memory.
  const float* seed() { return &carry_->dloss; }

  // The first N records since the last read and the carry after them, read from the
  // runtime (waiting for the work queued before it).
  struct Read {
    std::vector<DeferredStep> steps;
    StepCarry carry;
  };
  Read read(int n);

 private:
  Runtime& rt_;
  StepRule rule_;
  int slots_;
  StepCarry* carry_;     // the runtime's memory, followed by
  DeferredStep* steps_;  // slots_ records
};

}  // namespace ringstep
