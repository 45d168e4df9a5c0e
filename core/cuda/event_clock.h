// A DeviceClock (core/device_clock.h) of CUDA events on the legacy default stream, the CUDA
// backend's compute stream. Plain C++ header.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device_clock.h"

namespace ringstep::cuda {

// CAPACITY events are created here, at once, so that marking a phase inside a step creates
// none; a run that marks more between clears than it said creates the rest on demand.
// Failures throw (cuda_check.h).
std::unique_ptr<DeviceClock> make_event_clock(size_t capacity);

}  // namespace ringstep::cuda
