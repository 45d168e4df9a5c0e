#include "core/device.h"

#include <string>

#include "core/error.h"

namespace ringstep {

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

void require_device(Device d, const char* what) {
  if (d == Device::cpu) return;
  throw InputError(std::string(what) + ": device " + device_name(d) +
                   " is not available in this build (only cpu allocates and runs ops)");
}

}  // namespace ringstep
