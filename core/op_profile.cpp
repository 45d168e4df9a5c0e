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
  if (device_ && on()) {
    start_ns_ = steady_now_ns();
    start_mark_ = device_->mark();
  }
}

int64_t OpClock::begin() {
  if (!on()) return 0;
  return device_ ? device_->mark() : steady_now_ns();
}

void OpClock::end(Op op, int64_t t0, const OpCost& cost) {
  if (!on()) return;
  if (device_) {
    pending_.push_back({op, int(t0), device_->mark(), cost});
    return;
  }
  const int64_t t1 = steady_now_ns();
  add(op, double(t1 - t0) / 1e6, cost, t0, t1);
}

void OpClock::stop() {
  if (device_ && on()) {
    if (!pending_.empty()) device_->wait(pending_.back().to);
    auto at_ns = [&](int mark) {
      return start_ns_ + int64_t(device_->elapsed_ms(start_mark_, mark) * 1e6);
    };
    for (const DeviceOp& d : pending_)
      add(d.op, device_->elapsed_ms(d.from, d.to), d.cost, at_ns(d.from), at_ns(d.to));
    pending_.clear();
    device_->clear();
  }
  profile_ = nullptr;
}

void OpClock::add(Op op, double ms, const OpCost& cost, int64_t t0_ns, int64_t t1_ns) {
  OpStat& s = profile_->at(phase_, op);
  ++s.calls;
  s.ms += ms;
  s.flops += cost.flops;
  s.bytes += cost.bytes;
  if (trace_) trace_->span(Lane::compute, name(op), t0_ns, t1_ns, step_, size_t(cost.bytes));
}

}  // namespace ringstep
