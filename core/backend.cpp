#include "core/backend.h"

#include "core/cpu/cpu_backend.h"

namespace ringstep {

std::unique_ptr<Backend> make_backend(Device device, DType act_dtype) {
  require_device(device, "backend");
  return std::make_unique<cpu::CpuBackend>(act_dtype);
}

}  // namespace ringstep
