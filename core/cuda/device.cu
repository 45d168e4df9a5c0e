#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/threads.h"

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

namespace ringstep::cuda {

void use_local_device() {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CUDA_CHECK(cudaSetDevice(local_rank() % count));
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void device_free(void* p) {
  if (p != nullptr) cudaFree(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void device_memset_zero(void* p, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemset(p, 0, bytes));
}

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace ringstep::cuda
