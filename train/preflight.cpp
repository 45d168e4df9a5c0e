#include "train/preflight.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/runtime.h"
#include "core/threads.h"
#include "models/gpt_spec.h"
#include "train/report.h"

namespace ringstep {
namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1 << 30));
  return buf;
}

}  // namespace

MachineLimits machine_limits(Device device) {
  Runtime& rt = runtime(device, "run.device");
  return {double(rt.memory().total_bytes), hardware_threads(),
          rt.host_memory() ? "this machine" : "the GPU (" + rt.device_name() + ")"};
}

MemoryEstimate memory_estimate(const Config& cfg) {
  const double param_bytes = sizeof(float) * GptSpec::buffer_elements(cfg.model);
  return {param_bytes, param_bytes, 2 * param_bytes, activation_estimate_bytes(cfg)};
}

double memory_estimate_bytes(const Config& cfg) { return memory_estimate(cfg).total_bytes(); }

void check_fits_machine(const Config& cfg, const MachineLimits& machine) {
  const int max_threads = kMaxThreadsPerCore * machine.cores;
  if (cfg.run.threads > max_threads) {
    throw InputError("'run.threads' is " + std::to_string(cfg.run.threads) + ", more than " +
                     std::to_string(kMaxThreadsPerCore) + " x the " +
                     std::to_string(machine.cores) +
                     " cores this rank may use; set it lower or to auto");
  }
  const double need = memory_estimate_bytes(cfg);
  if (machine.memory_bytes > 0 && need > machine.memory_bytes) {
    throw InputError("the model (" + std::to_string(cfg.model.n_layers) + " layers, d_model " +
                     std::to_string(cfg.model.d_model) +
                     "; parameters, gradients, AdamW moments and activations) needs " + gib(need) +
                     ", " + machine.memory_of + " has " + gib(machine.memory_bytes));
  }
}

}  // namespace ringstep
