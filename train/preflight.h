// Checks of a config against the machine a rank runs on, made before anything is allocated:
// a model that cannot fit in the memory of its device (physical RAM, or the GPU's memory for
// run.device cuda), or a thread count far beyond the cores, is refused with a message
// instead of swapping, failing an allocation or hanging. Throws InputError.
#pragma once

#include <string>

#include "core/config.h"

namespace ringstep {

// What this machine offers one rank: the memory of DEVICE (physical RAM for the CPU, the
// GPU's whole memory for cuda: the device runtime's, core/runtime.h) and the cores it may
// run on. InputError where DEVICE has no runtime here.
struct MachineLimits {
  double memory_bytes = 0;
  int cores = 1;
  std::string memory_of = "this machine";  // "the GPU (NVIDIA H200)"
};
MachineLimits machine_limits(Device device = Device::cpu);

// Threads above this many per core are refused: they only add contention.
constexpr int kMaxThreadsPerCore = 4;

// What CFG keeps in memory on one rank, part by part: fp32 parameters, gradients and AdamW's
// two moments (4, 4 and 8 bytes per element of the model's flat buffers, models/gpt_spec.h)
// and activation_estimate_bytes. Computed in double, so an absurd config cannot overflow it
// (InputError from the spec for one beyond 2^53 parameters).
struct MemoryEstimate {
  double params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_bytes = 0;
  double total_bytes() const {
    return params_bytes + grads_bytes + optimizer_bytes + activations_bytes;
  }
};
MemoryEstimate memory_estimate(const Config& cfg);
// memory_estimate(CFG).total_bytes(): what check_fits_machine compares with the RAM.
double memory_estimate_bytes(const Config& cfg);

// Throws InputError "needs X GiB, this machine has Y GiB" ("the GPU (NAME) has") when
// memory_estimate_bytes exceeds MACHINE's memory, or when run.threads exceeds
// kMaxThreadsPerCore x its cores.
void check_fits_machine(const Config& cfg, const MachineLimits& machine);

}  // namespace ringstep
