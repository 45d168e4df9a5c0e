#include "core/cpu/blas_env.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/threads.h"

#ifdef RINGSTEP_HAVE_BLAS
extern "C" char* openblas_get_corename(void);
extern "C" int openblas_get_parallel(void);  // 0 sequential, 1 pthreads, 2 OpenMP
#endif

namespace ringstep {
namespace {

bool set_blas_coretype() {
#ifdef RINGSTEP_HAVE_BLAS
  if (std::getenv("OPENBLAS_CORETYPE")) return false;
  const char* core = openblas_get_corename();
  const bool generic =
      core && (std::strcmp(core, "Prescott") == 0 || std::strcmp(core, "Core2") == 0 ||
               std::strcmp(core, "Nehalem") == 0);
  if (!generic || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return false;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  return true;
#else
  return false;
#endif
}

bool set_omp_wait() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return false;
  setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  return true;
}

}  // namespace

void select_runtime_env(int argc, char** argv) {
  (void)argc;
  if (std::getenv("RINGSTEP_ENV_REEXEC")) return;  // never loop
  const bool blas = set_blas_coretype();
  const bool omp = set_omp_wait();
  if (!blas && !omp) return;
  setenv("RINGSTEP_ENV_REEXEC", "1", 1);
  restore_process_affinity();
  execv("/proc/self/exe", argv);
  // execv failed: carry on with the libraries' defaults rather than not at all.
}

std::string blas_description() {
#ifdef RINGSTEP_HAVE_BLAS
  static const char* const kBuilds[] = {"sequential", "pthreads", "OpenMP"};
  const int build = openblas_get_parallel();
  std::string s = std::string("OpenBLAS ") + openblas_get_corename() + " (" +
                  (build >= 0 && build <= 2 ? kBuilds[build] : "unknown") + " build)";
  if (std::getenv("OPENBLAS_CORETYPE"))
    s += std::string(" (OPENBLAS_CORETYPE=") + std::getenv("OPENBLAS_CORETYPE") + ")";
  return s;
#else
  return "Eigen's own GEMM (no BLAS)";
#endif
}

std::string omp_wait_description() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return std::string("OMP_WAIT_POLICY=") + p;
  if (const char* s = std::getenv("GOMP_SPINCOUNT")) return std::string("GOMP_SPINCOUNT=") + s;
  return "libgomp default spin";
}

}  // namespace ringstep
