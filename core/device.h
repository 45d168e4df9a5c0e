// Where a buffer lives and where ops run. Each device has one runtime (core/runtime.h);
// Device::cuda has one only in a build with the CUDA backend on a machine with a usable GPU.
#pragma once

#include <array>
#include <cstdint>

#include "core/enum_names.h"

namespace ringstep {

enum class Device : uint8_t { cpu, cuda };
constexpr auto enum_names(Device) {
  return std::to_array<EnumName<Device>>({{Device::cpu, "cpu"}, {Device::cuda, "cuda"}});
}

}  // namespace ringstep
