#include "core/backend.h"

#include "core/runtime.h"

namespace ringstep {

std::unique_ptr<Backend> make_backend(Device device, DType act_dtype, bool tf32) {
  return runtime(device, "backend").make_backend(act_dtype, tf32);
}

}  // namespace ringstep
