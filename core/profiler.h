// Step timing: a steady-clock stopwatch and the per-step phase record whose fields are
// those of the steps.jsonl record (docs/logs.md). The sum rule
// data + forward + backward + optimizer + comm_exposed + other = step holds by
// construction: `other` is what the named phases leave of the step.
//
// On a GPU the phases are timed on the device's compute stream (a DeviceClock, CUDA events):
// marks are recorded in stream order without waiting, and read once per log interval, so
// the host never waits on the GPU to time a phase.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device_clock.h"

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
//
// Timing on a device (time_on_device): the phases timed with begin_phase/end_phase and the
// step itself are also marked on the device's stream; end_step() still returns the host's
// times, and read_device() later gives every step since the last read its device times
// (those phases and `step` from the marks, comm, comm_exposed and recompute as the host
// measured them, `other` by the sum rule).
class StepTimer {
 public:
  using NowNs = std::function<int64_t()>;
  explicit StepTimer(bool enabled, NowNs now_ns = steady_now_ns)
      : enabled_(enabled), now_(std::move(now_ns)) {}
  bool enabled() const { return enabled_; }
  // From the next step on; only on an enabled timer.
  void time_on_device(std::unique_ptr<DeviceClock> clock) {
    if (enabled_) device_ = std::move(clock);
  }
  bool on_device() const { return device_ != nullptr; }
  void begin_step() {
    times_ = {};
    step_start_ = mark();
    if (device_) {
      steps_.emplace_back();
      steps_.back().begin = device_->mark();
    }
  }
  int64_t mark() const { return enabled_ ? now_() : 0; }

  // Where a phase started: the host's clock and, timing on a device, its mark there.
  struct PhaseStart {
    int64_t ns = 0;
    int device_mark = -1;
  };
  PhaseStart begin_phase() { return {mark(), device_ ? device_->mark() : -1}; }
  // Ends the phase begun at START as FIELD; returns the host's now (0 when disabled).
  int64_t end_phase(double PhaseTimes::*field, PhaseStart start) {
    const int64_t t1 = add(field, start.ns);
    if (device_) steps_.back().spans.push_back({field, start.device_mark, device_->mark()});
    return t1;
  }
  // The device times of every step ended since the last call, in order (see above); waits
  // once, for the last step's end. Empty unless timing on a device.
  std::vector<PhaseTimes> read_device() {
    std::vector<PhaseTimes> out;
    if (!steps_.empty()) device_->wait(steps_.back().end);
    for (const DeviceStep& s : steps_) {
      PhaseTimes t = s.host;
      for (const DeviceSpan& d : s.spans) t.*d.field = 0;
      for (const DeviceSpan& d : s.spans) t.*d.field += device_->elapsed_ms(d.from, d.to);
      t.step = device_->elapsed_ms(s.begin, s.end);
      t.close();
      out.push_back(t);
    }
    steps_.clear();
    if (device_) device_->clear();
    return out;
  }
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
    if (device_) {
      steps_.back().end = device_->mark();
      steps_.back().host = times_;
    }
    return times_;
  }
  const PhaseTimes& times() const { return times_; }

 private:
  struct DeviceSpan {
    double PhaseTimes::*field;
    int from, to;
  };
  struct DeviceStep {
    int begin = -1, end = -1;
    std::vector<DeviceSpan> spans;
    PhaseTimes host;
  };

  bool enabled_;
  NowNs now_;
  PhaseTimes times_;
  int64_t step_start_ = 0;
  std::unique_ptr<DeviceClock> device_;
  std::vector<DeviceStep> steps_;  // ended (the last one perhaps still running), not yet read
};

}  // namespace ringstep
