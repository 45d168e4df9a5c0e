// OpenBLAS picks its kernels once, when the library loads, from CPUID or from the
// OPENBLAS_CORETYPE variable. Debian's OpenBLAS 0.3.21 predates Sapphire/Emerald Rapids
// (family 6, models 143 and 207) and falls back to its Prescott (SSE3) kernels there, several
// times slower than its AVX-512 SkylakeX kernels that these CPUs run correctly (docs/perf.md
// section 1 has the numbers).
#pragma once

#include <string>

namespace ringstep {

// Called first thing in main: when OPENBLAS_CORETYPE is unset, OpenBLAS does not know
// this CPU and the CPU has AVX-512, sets OPENBLAS_CORETYPE=SkylakeX and re-executes the
// program (same pid, same arguments) so the library loads with the right kernels. A user's
// own OPENBLAS_CORETYPE is always respected. Returns normally when nothing needs doing.
void select_blas_kernels(int argc, char** argv);
// "OpenBLAS SkylakeX (OPENBLAS_CORETYPE)" or "Eigen (no BLAS)", for the log header.
std::string blas_description();

}  // namespace ringstep
