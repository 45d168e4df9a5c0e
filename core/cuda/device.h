// Whether a CUDA device can be used, asked without aborting, and the few memory calls that
// plain C++ code (Arena, FlatBuffer, tests) needs. Plain C++ (no CUDA types). In builds
// without the CUDA backend the queries answer "no device" and the memory calls are absent.
#pragma once

#include <cstddef>
#include <string>

namespace ringstep {

#if defined(RINGSTEP_HAVE_CUDA) || defined(__CUDACC__)
// True iff cudaGetDeviceCount succeeds and reports at least one device.
bool cuda_available();
// Name of the current device ("NVIDIA H100 80GB HBM3"); empty when none is available.
std::string cuda_device_name();

namespace cuda {
// Makes GPU local_rank() % (device count) (core/threads.h) current on the calling thread:
// one GPU per rank of a node, shared round-robin when the node has fewer GPUs than ranks.
// Call before the first allocation; throws (cuda_check.h) on failure.
void use_local_device();
// One cudaMalloc of BYTES (at least 1), 256-byte aligned; throws (cuda_check.h) on failure.
void* device_alloc(size_t bytes);
void device_free(void* p);  // null is fine; errors are ignored (called from destructors)
// Blocking copies on the legacy default stream, which orders them after all earlier work
// on that stream (the CUDA backend's stream).
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_bytes(void* dst, const void* src, size_t bytes);  // any direction (cudaMemcpyDefault)
void device_memset_zero(void* p, size_t bytes);
void device_synchronize();
}  // namespace cuda
#else
inline bool cuda_available() { return false; }
inline std::string cuda_device_name() { return ""; }
#endif

}  // namespace ringstep
