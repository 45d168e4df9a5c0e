// The CUDA runtime (core/runtime.h): cudaMalloc'd memory, copies on the legacy default
// stream (the CUDA backend's compute stream), CUDA events as the clock, the datasheet peak
// (core/cuda/gpu_peak.h), the optimizer kernels of core/cuda/optim_cuda.h and the
// CudaBackend. Made once per process, on this rank's GPU (use_local_device). Plain C++.
#pragma once

#include <memory>
#include <string>

#include "core/runtime.h"

namespace ringstep::cuda {

// The runtime of this rank's GPU, or null with WHY set when no CUDA device is usable.
std::unique_ptr<Runtime> make_cuda_runtime(std::string& why);

}  // namespace ringstep::cuda
