#include "core/backend.h"

#include "core/runtime.h"

namespace ringstep {

double attention_state_bytes(Device device, DType act, double B, double T, double NH) {
  return device == Device::cpu ? B * NH * T * T * double(dtype_size(act)) : B * NH * T * 4.0;
}

std::unique_ptr<Backend> make_backend(Device device, DType act_dtype, bool tf32) {
  return runtime(device, "backend").make_backend(act_dtype, tf32);
}

}  // namespace ringstep
