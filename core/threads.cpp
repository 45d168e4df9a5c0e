#include "core/threads.h"

#include <omp.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <thread>

#include "core/error.h"

#ifdef RINGSTEP_HAVE_BLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace ringstep {

int hardware_threads() {
  // The affinity mask honours taskset, cgroup cpusets and mpirun --bind-to, which
  // hardware_concurrency() does not.
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int resolve_threads(int requested, int local_ranks, int hardware) {
  if (requested < 0) {
    throw InputError("threads must be a positive integer or auto (0), got " +
                     std::to_string(requested));
  }
  if (requested > 0) return requested;
  return std::max(1, hardware / std::max(1, local_ranks));
}

int resolve_threads(int requested, int local_ranks) {
  return resolve_threads(requested, local_ranks, hardware_threads());
}

namespace {

// The first of VARS that holds an integer in [lo, 2^20), else FALLBACK.
int launcher_int(std::initializer_list<const char*> vars, long lo, int fallback) {
  for (const char* var : vars) {
    const char* value = std::getenv(var);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    // Trailing text is ignored, so a Slurm task list such as "2(x3)" still yields 2.
    if (end != value && n >= lo && n < (1 << 20)) return static_cast<int>(n);
  }
  return fallback;
}

}  // namespace

int local_rank_count() {
  return launcher_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1,
                      1);
}

int local_rank() {
  return launcher_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0, 0);
}

void set_compute_threads(int n) {
  omp_set_num_threads(n);
  omp_set_max_active_levels(1);
  Eigen::setNbThreads(n);
#ifdef RINGSTEP_HAVE_BLAS
  openblas_set_num_threads(n);
#endif
}

}  // namespace ringstep
