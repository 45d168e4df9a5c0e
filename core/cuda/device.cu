#include <cuda_runtime_api.h>

#include "core/cuda/device.h"

namespace ringstep {

bool cuda_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  // Without a driver the call fails (cudaErrorNoDevice, cudaErrorInsufficientDriver);
  // clear the error so that it does not surface from an unrelated later call.
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::string cuda_device_name() {
  if (!cuda_available()) return "";
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

}  // namespace ringstep
