#include "train/deferred_steps.h"

#include <stdexcept>

namespace ringstep {

DeferredSteps::DeferredSteps(Runtime& rt, const StepRule& rule, int slots)
    : rt_(rt), rule_(rule), slots_(slots) {
  if (slots < 1) throw std::logic_error("DeferredSteps: at least one slot");
  static_assert(sizeof(StepCarry) % alignof(DeferredStep) == 0);
  void* mem = rt.alloc(sizeof(StepCarry) + size_t(slots) * sizeof(DeferredStep));
  carry_ = static_cast<StepCarry*>(mem);
  steps_ = reinterpret_cast<DeferredStep*>(static_cast<char*>(mem) + sizeof(StepCarry));
}

DeferredSteps::~DeferredSteps() { rt_.free(carry_); }

void DeferredSteps::load(const LossScalerState& scaler, int64_t t) {
  StepCarry c;
  c.scaler = scaler;
  c.t = t;
  c.dloss = float(scaler.scale / rule_.grad_accum_steps);
  rt_.copy(carry_, &c, sizeof c);
}

DeferredStep* DeferredSteps::begin(int i) {
  if (i < 0 || i >= slots_) throw std::logic_error("DeferredSteps::begin: slot out of range");
  rt_.zero(&steps_[i], sizeof(DeferredStep));
  return &steps_[i];
}

DeferredSteps::Read DeferredSteps::read(int n) {
  if (n < 0 || n > slots_) throw std::logic_error("DeferredSteps::read: more steps than slots");
  Read r;
  r.steps.resize(size_t(n));
  if (n > 0) rt_.copy(r.steps.data(), steps_, size_t(n) * sizeof(DeferredStep));
  rt_.copy(&r.carry, carry_, sizeof r.carry);
  return r;
}

}  // namespace ringstep
