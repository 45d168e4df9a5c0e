#include "core/cpu/blas_env.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#ifdef RINGSTEP_HAVE_BLAS
extern "C" char* openblas_get_corename(void);
#endif

namespace ringstep {

void select_blas_kernels(int argc, char** argv) {
#ifdef RINGSTEP_HAVE_BLAS
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("RINGSTEP_BLAS_REEXEC")) return;
  const char* core = openblas_get_corename();
  const bool generic = core && (std::strcmp(core, "Prescott") == 0 ||
                                std::strcmp(core, "Core2") == 0 || std::strcmp(core, "Nehalem") == 0);
  if (!generic || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  setenv("RINGSTEP_BLAS_REEXEC", "1", 1);  // never loop
  execv("/proc/self/exe", argv);
  // execv failed: carry on with the slow kernels rather than not at all.
#else
  (void)argc;
  (void)argv;
#endif
}

std::string blas_description() {
#ifdef RINGSTEP_HAVE_BLAS
  std::string s = std::string("OpenBLAS ") + openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE"))
    s += std::string(" (OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") + ")";
  return s;
#else
  return "Eigen's own GEMM (no BLAS)";
#endif
}

}  // namespace ringstep
