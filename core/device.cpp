#include "core/device.h"

#include <string>

#include "core/cuda/device.h"
#include "core/error.h"

namespace ringstep {

void require_device(Device d, const char* what) {
  if (d == Device::cpu) return;
#ifdef RINGSTEP_HAVE_CUDA
  if (cuda_available()) return;
  throw InputError(std::string(what) + ": device " + name(d) +
                   " is not available: no CUDA device or driver is usable on this machine");
#else
  throw InputError(std::string(what) + ": device " + name(d) +
                   " is not available in this build (built without the CUDA backend)");
#endif
}

}  // namespace ringstep
