// Step timing: a steady-clock stopwatch and the per-step phase record whose fields are
// those of the steps.jsonl record (DESIGN.md, docs/logs.md). The sum rule
// data + forward + backward + optimizer + comm_exposed + other = step holds by
// construction: `other` is what the named phases leave of the step.
#pragma once

#include <chrono>
#include <cstdint>

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

}  // namespace ringstep
