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

// An upper bound of what CFG keeps in memory on one rank, part by part: fp32 parameters,
// gradients and AdamW's two moments (4, 4 and 8 bytes per parameter, gpt_param_estimate) and
// activation_estimate_bytes. Computed in double, so an absurd config cannot overflow it.
struct MemoryEstimate {
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  double total_bytes() const {
    return params_bytes + grads_bytes + optimizer_bytes + activations_bytes;
  }
};
MemoryEstimate memory_estimate(const Config& cfg);
// memory_estimate(CFG).total_bytes(): what check_fits_machine compares with the RAM.
double memory_estimate_bytes(const Config& cfg);

// Throws InputError "needs X GiB, this machine has Y GiB" when memory_estimate_bytes exceeds
// MACHINE's RAM, or when run.threads exceeds kMaxThreadsPerCore x its cores.
void check_fits_machine(const Config& cfg, const MachineLimits& machine);

}  // namespace ringstep
