#include "core/op_profile.h"

#include <string>

namespace ringstep {

bool OpProfile::empty() const {
  for (const auto& phase : stat)
    for (const OpStat& s : phase)
      if (s.calls > 0) return false;
  return true;
}

double OpProfile::phase_ms(OpPhase p) const {
  double ms = 0;
  for (const OpStat& s : stat[size_t(p)]) ms += s.ms;
  return ms;
}

void OpClock::start(OpProfile* profile, OpPhase phase, TraceRecorder* trace, int step) {
  profile_ = profile;
  phase_ = phase;
  trace_ = trace;
  step_ = step;
}

void OpClock::end(Op op, int64_t t0, const OpCost& cost) {
  if (!on()) return;
  const int64_t t1 = steady_now_ns();
  OpStat& s = profile_->at(phase_, op);
  ++s.calls;
  s.ms += double(t1 - t0) / 1e6;
  s.flops += cost.flops;
  s.bytes += cost.bytes;
  if (trace_) trace_->span(Lane::compute, name(op), t0, t1, step_, size_t(cost.bytes));
}

}  // namespace ringstep
