// Whether a CUDA device can be used, asked without aborting: on a machine with no GPU or
// no driver cuda_available() is false. Plain C++ (no CUDA types); in builds without the
// CUDA backend the answers are constant (false, "").
#pragma once

#include <string>

namespace ringstep {

#if defined(RINGSTEP_HAVE_CUDA) || defined(__CUDACC__)
// True iff cudaGetDeviceCount succeeds and reports at least one device.
bool cuda_available();
// Name of the current device ("NVIDIA H100 80GB HBM3"); empty when none is available.
std::string cuda_device_name();
#else
inline bool cuda_available() { return false; }
inline std::string cuda_device_name() { return ""; }
#endif

}  // namespace ringstep
