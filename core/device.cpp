#include "core/device.h"

#include <string>

#include "core/error.h"

namespace ringstep {

void require_device(Device d, const char* what) {
  if (d == Device::cpu) return;
  throw InputError(std::string(what) + ": device " + name(d) +
                   " is not available in this build (only cpu allocates and runs ops)");
}

}  // namespace ringstep
