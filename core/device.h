// Where a buffer lives and where ops run. Only Device::cpu allocates and computes in this
// build; asking for cuda memory or a cuda backend is an InputError naming the request (a
// later CUDA backend adds the device side; core/cuda/device.h only probes for a GPU).
#pragma once

#include <array>
#include <cstdint>

#include "core/enum_names.h"

namespace ringstep {

enum class Device : uint8_t { cpu, cuda };
constexpr auto enum_names(Device) {
  return std::to_array<EnumName<Device>>({{Device::cpu, "cpu"}, {Device::cuda, "cuda"}});
}

// Throws InputError("WHAT: device cuda is not available in this build ...") unless D is
// a device this build can allocate on and run ops on.
void require_device(Device d, const char* what);

}  // namespace ringstep
