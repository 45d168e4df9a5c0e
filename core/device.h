// Where a buffer lives and where ops run. Only Device::cpu allocates and computes in this
// build; asking for cuda memory or a cuda backend is an InputError naming the request (a
// later CUDA backend adds the device side; core/cuda/device.h only probes for a GPU).
#pragma once

#include <cstdint>

namespace ringstep {

enum class Device : uint8_t { cpu, cuda };

const char* device_name(Device d);  // "cpu", "cuda"

// Throws InputError("WHAT: device cuda is not available in this build ...") unless D is
// a device this build can allocate on and run ops on.
void require_device(Device d, const char* what);

}  // namespace ringstep
