// Checks of a config against the machine a rank runs on, made before anything is allocated:
// a model that cannot fit in physical RAM, or a thread count far beyond the cores, is refused
// with a message instead of swapping, failing an allocation or hanging. Throws InputError.
#pragma once

#include "core/config.h"

namespace ringstep {

// What this machine offers one rank: physical RAM (sysconf) and the cores it may run on.
struct MachineLimits {
  double ram_bytes = 0;
  int cores = 1;
};
MachineLimits machine_limits();

// Threads above this many per core are refused: they only add contention.
constexpr int kMaxThreadsPerCore = 4;

// An upper bound of what CFG keeps in memory on one rank: parameters, gradients and AdamW's
// two moments (4 x 4 bytes per parameter) plus activation_estimate_bytes. Computed in double, so an
// absurd config cannot overflow it.
double memory_estimate_bytes(const Config& cfg);

// Throws InputError "needs X GiB, this machine has Y GiB" when memory_estimate_bytes exceeds
// MACHINE's RAM, or when run.threads exceeds kMaxThreadsPerCore x its cores.
void check_fits_machine(const Config& cfg, const MachineLimits& machine);

}  // namespace ringstep
