// Where a buffer lives and where ops run. Device::cuda allocates and computes only in a
// build with the CUDA backend (RINGSTEP_HAVE_CUDA) on a machine with a usable GPU; asking
// for it elsewhere is an InputError naming the request.
#pragma once

#include <array>
#include <cstdint>

#include "core/enum_names.h"

namespace ringstep {

enum class Device : uint8_t { cpu, cuda };
constexpr auto enum_names(Device) {
  return std::to_array<EnumName<Device>>({{Device::cpu, "cpu"}, {Device::cuda, "cuda"}});
}

// Throws InputError("WHAT: device cuda ...") unless D is a device this build can allocate
// on and run ops on here.
void require_device(Device d, const char* what);

}  // namespace ringstep
