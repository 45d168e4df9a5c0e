// The process environment that the compute libraries read once, when they load:
// - OpenBLAS picks its kernels from CPUID or OPENBLAS_CORETYPE. Debian's OpenBLAS 0.3.21
//   predates Sapphire/Emerald Rapids (family 6, models 143 and 207) and falls back to its
//   Prescott (SSE3) kernels there, several times slower than its AVX-512 SkylakeX kernels
//   that these CPUs run correctly (docs/perf-log.md section 1).
// - libgomp's idle threads spin for GOMP_SPINCOUNT iterations (300,000 by default, about a
//   millisecond) before they sleep. A spinning thread takes a core from whatever else wants
//   it: another rank, the comm engine thread, a neighbour's job; and a barrier waits for the
//   thread that was descheduled. ringstep's default is a short spin (kSpinCount) that keeps
//   back-to-back regions cheap but sleeps within microseconds (docs/perf-log.md
//   section 14).
#pragma once

#include <string>

namespace ringstep {

// Spin iterations of an idle OpenMP thread before it sleeps, unless the user set
// OMP_WAIT_POLICY or GOMP_SPINCOUNT.
inline constexpr const char* kSpinCount = "10000";

// Called first thing in main. Sets, where the user has not:
//   OPENBLAS_CORETYPE=SkylakeX when OpenBLAS does not know this CPU and it has AVX-512;
//   GOMP_SPINCOUNT=kSpinCount when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set;
// and if it set anything, re-executes the program (same pid, same arguments, on all of the
// process's CPUs: threads.h) so that the libraries load with it. A user's own settings are
// always respected. Returns normally when nothing needs doing.
void select_runtime_env(int argc, char** argv);
// "OpenBLAS SkylakeX (OPENBLAS_CORETYPE)" or "Eigen (no BLAS)", for the log header.
std::string blas_description();
// "GOMP_SPINCOUNT=10000", or the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT, for the log header.
std::string omp_wait_description();

}  // namespace ringstep
