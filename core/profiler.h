// Step timing: a steady-clock stopwatch and the per-step phase record whose fields are
// those of the steps.jsonl record (docs/logs.md). The sum rule
// data + forward + backward + optimizer + comm_exposed + other = step holds by
// construction: `other` is what the named phases leave of the step.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>

namespace ringstep {

using SteadyClock = std::chrono::steady_clock;

// Nanoseconds on steady_clock (CLOCK_MONOTONIC: one clock for every process of a node).
inline int64_t to_ns(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline int64_t steady_now_ns() { return to_ns(SteadyClock::now()); }

inline double ms_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
}

struct PhaseTimes {
  double step = 0, data = 0, forward = 0, backward = 0, recompute = 0, optimizer = 0, comm = 0,
         comm_exposed = 0, other = 0;
  void close() {
    other = step - (data + forward + backward + optimizer + comm_exposed);
    if (other < 0) other = 0;
  }
};

// The phases in the order of the step record's `time_ms` object: the one table that the
// record's writer and reader, the cross-rank gather and the report walk.
struct PhaseField {
  const char* name;
  double PhaseTimes::*ms;
};
inline constexpr std::array<PhaseField, 9> kPhaseFields = {{
    {"step", &PhaseTimes::step},
    {"data", &PhaseTimes::data},
    {"forward", &PhaseTimes::forward},
    {"backward", &PhaseTimes::backward},
    {"recompute", &PhaseTimes::recompute},
    {"optimizer", &PhaseTimes::optimizer},
    {"comm", &PhaseTimes::comm},
    {"comm_exposed", &PhaseTimes::comm_exposed},
    {"other", &PhaseTimes::other},
}};

// Attributes one step's wall time to its phases. The clock is injectable so tests can drive
// it; a disabled timer reads no clock at all (profile.enabled: false costs nothing) and
// leaves every field 0.
class StepTimer {
 public:
  using NowNs = std::function<int64_t()>;
  explicit StepTimer(bool enabled, NowNs now_ns = steady_now_ns)
      : enabled_(enabled), now_(std::move(now_ns)) {}
  bool enabled() const { return enabled_; }
  void begin_step() {
    times_ = {};
    step_start_ = mark();
  }
  int64_t mark() const { return enabled_ ? now_() : 0; }
  // Adds [t0, now) to FIELD and returns now (0 when disabled).
  int64_t add(double PhaseTimes::*field, int64_t t0) {
    if (!enabled_) return 0;
    const int64_t t1 = now_();
    times_.*field += double(t1 - t0) / 1e6;
    return t1;
  }
  // Adds MS measured elsewhere (the model's own recompute clock) to FIELD.
  void add_ms(double PhaseTimes::*field, double ms) {
    if (enabled_) times_.*field += ms;
  }
  // Closes the step: comm numbers come from the comm engine's own spans and waits.
  const PhaseTimes& end_step(double comm_ms, double comm_exposed_ms) {
    if (enabled_) {
      times_.step = double(now_() - step_start_) / 1e6;
      times_.comm = comm_ms;
      times_.comm_exposed = comm_exposed_ms;
      times_.close();
    }
    return times_;
  }
  const PhaseTimes& times() const { return times_; }

 private:
  bool enabled_;
  NowNs now_;
  PhaseTimes times_;
  int64_t step_start_ = 0;
};

}  // namespace ringstep
