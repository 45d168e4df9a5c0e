#include "core/threads.h"

#include <omp.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

#ifdef RINGSTEP_HAVE_BLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace ringstep {

namespace {

// The CPUs hardware_threads counts (threads.h); false when the mask cannot be read.
bool process_cpu_set(cpu_set_t& set) {
  CPU_ZERO(&set);
  const int places = omp_get_proc_bind() == omp_proc_bind_false ? 0 : omp_get_num_places();
  if (places <= 0) return sched_getaffinity(0, sizeof(set), &set) == 0;
  for (int p = 0; p < places; ++p) {
    std::vector<int> ids(size_t(std::max(0, omp_get_place_num_procs(p))));
    omp_get_place_proc_ids(p, ids.data());
    for (int id : ids)
      if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &set);
  }
  return CPU_COUNT(&set) > 0;
}

}  // namespace

int hardware_threads() {
  // The affinity mask honours taskset, cgroup cpusets and mpirun --bind-to, which
  // hardware_concurrency() does not.
  cpu_set_t set;
  if (process_cpu_set(set)) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string process_cpus_description() {
  cpu_set_t set;
  if (!process_cpu_set(set)) return "unknown";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (last > c) out += '-' + std::to_string(last);
    c = last;
  }
  return out;
}

void restore_process_affinity() {
  cpu_set_t set;
  if (process_cpu_set(set)) sched_setaffinity(0, sizeof(set), &set);
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

bool rank_has_spare_core(int n) { return hardware_threads() / std::max(1, local_rank_count()) > n; }

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

int launcher_rank() {
  return launcher_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0, 0);
}

int launcher_world_size() {
  return launcher_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1, 1);
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
