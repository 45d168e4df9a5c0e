// The CPU's runtime (core/runtime.h): aligned host memory (core/aligned_alloc.h), the host
// clock, the measured SGEMM peak, the optimizer passes of core/cpu/optim_passes.h and the
// CpuBackend.
#pragma once

#include <memory>

#include "core/runtime.h"

namespace ringstep::cpu {

std::unique_ptr<Runtime> make_cpu_runtime();

}  // namespace ringstep::cpu
