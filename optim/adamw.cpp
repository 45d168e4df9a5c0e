#include "optim/adamw.h"

#include <stdexcept>
#include <string>

#include "core/cpu/optim_passes.h"

namespace ringstep {

AdamW::AdamW(const Registry& reg, const AdamWParams& hp, Device device)
    : reg_(reg), hp_(hp), m_(reg.total_numel(), device), v_(reg.total_numel(), device) {}

AdamW::AdamW(const Registry& reg, const AdamWParams& hp, Runtime& rt)
    : reg_(reg), hp_(hp), m_(reg.total_numel(), rt), v_(reg.total_numel(), rt) {}

std::pair<AdamWStep, float> AdamW::next_step(double lr, double grad_scale) {
  ++t_;
  return {adamw_scalars(hp_.beta1, hp_.beta2, hp_.eps, lr, t_, grad_scale),
          float(lr * hp_.weight_decay)};
}

void AdamW::step(FlatBuffer& params, const FlatBuffer& grads, double lr, double grad_scale) {
  Runtime& rt = m_.runtime();
  if (&params.runtime() != &rt || &grads.runtime() != &rt)
    throw std::logic_error("AdamW::step: parameters, gradients and moments on different devices");
  const auto [s, decay] = next_step(lr, grad_scale);
  rt.adamw_update(reg_.tensors(), s, decay, params.data(), grads.data(), m_.data(), v_.data());
}

bool AdamW::fill_deferred_rule(StepRule& rule) const {
  rule.beta1 = hp_.beta1;
  rule.beta2 = hp_.beta2;
  rule.eps = hp_.eps;
  rule.weight_decay = hp_.weight_decay;
  return true;
}

void AdamW::step_deferred(FlatBuffer& params, const FlatBuffer& grads,
                          const DeferredStep* decided) {
  m_.runtime().adamw_update_if_applied(reg_.tensors(), decided, params.data(), grads.data(),
                                       m_.data(), v_.data());
}

std::vector<StateTensor> AdamW::state_tensors() {
  return {{"adam_m", &m_, false}, {"adam_v", &v_, false}};
}

void AdamW::step(float* params, const float* grads, double lr, double grad_scale) {
  if (!m_.runtime().host_memory())
    throw std::logic_error("AdamW::step: host arrays for moments on " +
                           std::string(name(m_.device())));
  const auto [s, decay] = next_step(lr, grad_scale);
  cpu::adamw_update(reg_.tensors(), s, decay, params, grads, m_.data(), v_.data());
}

}  // namespace ringstep
