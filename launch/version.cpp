#include "launch/version.h"

#include "core/cpu/blas_env.h"
#include "core/cpu/sgemm.h"
#include "ringstep_build_info.h"  // generated in the build directory

namespace ringstep {

std::string version_line() {
#ifdef RINGSTEP_HAVE_CUDA
  constexpr const char* kCuda = "on";
#else
  constexpr const char* kCuda = "off";
#endif
#ifdef RINGSTEP_HAVE_BLAS
  const std::string blas = "BLAS " + blas_description();
#else
  const std::string blas = blas_description();  // "Eigen's own GEMM (no BLAS)"
#endif
  return std::string("ringstep ") + RINGSTEP_VERSION + " (git " + RINGSTEP_GIT_DESCRIBE + ", " +
         RINGSTEP_BUILD_TYPE + " build, CUDA backend " + kCuda + ", " + blas + ", sgemm kernel " +
         cpu::sgemm_kernel() + ")";
}

}  // namespace ringstep
