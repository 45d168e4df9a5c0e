// A clock on a device's compute stream, for timing phases without making the host wait
// (core/profiler.h's StepTimer reads it once per log interval). Plain C++.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace ringstep {

// Points on a device's compute stream (core/cuda/event_clock.h records CUDA events): mark()
// records one in stream order and returns at once; wait() blocks until the device has
// passed a mark; elapsed_ms() reads two marks the device has passed. Marks are numbered
// 0, 1, ... from the last clear().
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  virtual int mark() = 0;
  virtual void wait(int mark) = 0;
  virtual double elapsed_ms(int from, int to) = 0;
  virtual void clear() = 0;
};

}  // namespace ringstep
