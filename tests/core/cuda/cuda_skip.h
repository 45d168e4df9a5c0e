// Why the CUDA tests cannot run in this process, or "" when they can: what a CUDA test's
// SetUp hands GTEST_SKIP, so CI (no GPU) stays green and says why.
#pragma once

#include <string>

#include "core/cuda/device.h"

namespace ringstep::testing {

inline std::string cuda_skip_reason() {
#ifndef RINGSTEP_HAVE_CUDA
  return "built without the CUDA backend (RINGSTEP_HAVE_CUDA unset): CUDA tests skipped";
#else
  if (!cuda_available())
    return "no CUDA device (cudaGetDeviceCount failed or returned 0): CUDA tests skipped";
  return "";
#endif
}

}  // namespace ringstep::testing
