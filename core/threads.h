// How many compute threads each rank uses. With several ranks on one node, "auto" splits
// the node's cores evenly between them so that OpenMP, Eigen and OpenBLAS do not
// oversubscribe. set_compute_threads is process-wide: call it once at start, before any
// parallel region.
#pragma once

#include <string>

namespace ringstep {

// CPUs this process may run on, at least 1: its affinity mask (taskset, cgroup cpusets,
// mpirun --bind-to), or, where OMP_PROC_BIND has libgomp bind threads, the union of
// libgomp's places (libgomp pins the initial thread to the first place before main, so that
// thread's own mask then shows one place only).
int hardware_threads();
// The same CPUs as a list for the log header: "0-3", "0,2,4-7".
std::string process_cpus_description();
// Makes the calling thread's affinity the whole of those CPUs again: before exec, whose
// new image inherits it (and would otherwise see one place only).
void restore_process_affinity();
// requested > 0 is used as is; 0 means auto: max(1, hardware / local_ranks).
// Throws InputError for a negative request.
int resolve_threads(int requested, int local_ranks);
int resolve_threads(int requested, int local_ranks, int hardware);
// Ranks on this node, from the launcher's environment (Open MPI, MPICH/Hydra, Slurm);
// 1 when none is set or the value is not a positive integer.
int local_rank_count();
// This rank's index among the ranks on its node, from the same environment; 0 when none is set.
int local_rank();
// This process's rank in the job and the job's rank count, from the same launchers'
// environment, for what must know them without starting MPI (`train --dry-run`); 0 and 1
// when none is set.
int launcher_rank();
int launcher_world_size();
// Whether this rank has a core its N compute threads leave free: more of this process's
// CPUs than N per rank on this node (hardware_threads() / local_rank_count(), as auto
// counts them).
bool rank_has_spare_core(int n);
// Sets OpenMP, Eigen and (when linked) OpenBLAS to n threads each, and keeps one OpenMP
// level active: a parallel region opened inside another runs on the thread that opens it
// (the kernels rely on it to call parallel ops from inside their own regions).
void set_compute_threads(int n);

}  // namespace ringstep
