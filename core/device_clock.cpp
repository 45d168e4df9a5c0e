#include "core/device_clock.h"

#ifdef RINGSTEP_HAVE_CUDA
#include "core/cuda/event_clock.h"
#endif

namespace ringstep {

std::unique_ptr<DeviceClock> make_device_clock(Device device, size_t capacity) {
  require_device(device, "device clock");
#ifdef RINGSTEP_HAVE_CUDA
  if (device == Device::cuda) return cuda::make_event_clock(capacity);
#endif
  return nullptr;
}

}  // namespace ringstep
