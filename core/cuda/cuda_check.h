// CUDA_CHECK / CUBLAS_CHECK: every CUDA runtime, cuBLAS and cuBLASLt call goes through one
// of them (cuBLASLt returns cublasStatus_t too), and every kernel launch is followed by
// CUDA_CHECK(cudaGetLastError()). A failure throws std::runtime_error naming the call, the
// error code and string, the file:line and, under a launcher, the rank. The one exception
// is releasing in destructors (cudaFree, *Destroy), which must not throw. Include only
// from CUDA-enabled sources.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace ringstep::cuda {

// Core knows nothing of MPI, so the rank comes from the launcher's environment.
inline std::string rank_suffix() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(var)) return std::string(" on rank ") + value;
  }
  return "";
}

[[noreturn]] inline void throw_call_failed(const char* call, const std::string& error,
                                           const char* file, int line) {
  throw std::runtime_error(std::string(call) + " failed: " + error + " at " + file + ":" +
                           std::to_string(line) + rank_suffix());
}

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw_call_failed(call,
                    std::string(cudaGetErrorName(err)) + " (" + std::to_string(int(err)) +
                        "): " + cudaGetErrorString(err),
                    file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw_call_failed(call,
                    std::string(cublasGetStatusName(status)) + " (" + std::to_string(int(status)) +
                        "): " + cublasGetStatusString(status),
                    file, line);
}

}  // namespace ringstep::cuda

#define CUDA_CHECK(call) ::ringstep::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::ringstep::cuda::check_cublas((call), #call, __FILE__, __LINE__)
