#include "core/backend.h"

#include "core/cpu/cpu_backend.h"
#ifdef RINGSTEP_HAVE_CUDA
#include "core/cuda/cuda_backend.h"
#endif

namespace ringstep {

std::unique_ptr<Backend> make_backend(Device device, DType act_dtype, bool tf32) {
  require_device(device, "backend");
#ifdef RINGSTEP_HAVE_CUDA
  if (device == Device::cuda) return cuda::make_cuda_backend(act_dtype, tf32);
#endif
  return std::make_unique<cpu::CpuBackend>(act_dtype);
}

}  // namespace ringstep
