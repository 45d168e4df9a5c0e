// `ringstep train CONFIG --dry-run`: the effective config, then what a run of it would need
// as YAML comments, so that the whole output is a config that loads back to the same one.
// Every number is a pure function of the config: nothing is allocated, no MPI is started.
#include <cstdio>
#include <string>

#include "core/config.h"
#include "core/runtime.h"
#include "core/threads.h"
#include "launch/commands.h"
#include "models/gpt_spec.h"
#include "train/preflight.h"
#include "train/report.h"
#include "train/run_dir.h"
#include "train/run_log.h"

namespace ringstep {
namespace {

void print_model_and_batch(const Config& cfg, int world) {
  const ModelConfig& m = cfg.model;
  std::printf("#   model      %s\n", model_summary(GptSpec(m)).c_str());
  const double sequences = double(cfg.train.micro_batch) * cfg.train.grad_accum_steps * world;
  std::printf("#   batch      %d micro x %d accum x %d ranks = %.0f sequences = %.0f tokens/step\n",
              cfg.train.micro_batch, cfg.train.grad_accum_steps, world, sequences,
              sequences * m.seq_len);
}

// Model FLOPs as the log header and the step records count them (docs/metrics.md), and the
// forward that backward repeats under the recompute policy (what HFU adds).
void print_flops(const Config& cfg, int world) {
  const ModelConfig& m = cfg.model;
  const double tokens =
      double(cfg.train.micro_batch) * cfg.train.grad_accum_steps * world * m.seq_len;
  const GptSpec spec(m);
  const double model = spec.model_flops_per_token();
  const double recompute = spec.recompute_flops_per_token(gpt_options(cfg));
  std::printf(
      "#   flops      %.3f MFLOP/token model (6N + 6LCT): %.2f GFLOP/step, %.2f GFLOP/step per "
      "rank\n",
      model / 1e6, model * tokens / 1e9, model * tokens / world / 1e9);
  std::printf(
      "#   recompute  %s: +%.3f MFLOP/token of forward redone in backward (+%.1f%%); %.2f "
      "GFLOP/step per rank with it\n",
      name(cfg.recompute.policy), recompute / 1e6, 100 * recompute / model,
      (model + recompute) * tokens / world / 1e9);
}

void print_memory(const Config& cfg, const MachineLimits& machine) {
  const MemoryEstimate e = memory_estimate(cfg);
  std::printf(
      "#   memory     %s per rank (estimate): params %s, grads %s, optimizer %s (AdamW "
      "moments),\n#              activations %s (arena peak, models/gpt_spec.h, recompute %s); %s "
      "has %s\n",
      human_bytes(e.total_bytes()).c_str(), human_bytes(e.params_bytes).c_str(),
      human_bytes(e.grads_bytes).c_str(), human_bytes(e.optimizer_bytes).c_str(),
      human_bytes(e.activations_bytes).c_str(), name(cfg.recompute.policy),
      machine.memory_of.c_str(), human_bytes(machine.memory_bytes).c_str());
}

}  // namespace

int run_train_dry_run(const std::string& config_path, const std::vector<std::string>& overrides,
                      int ranks) {
  // The checks `train` makes before it builds the model, in its order, but for the data and
  // checkpoint files, which a dry run does not read. Without MPI the ranks cannot agree on
  // one message, so each rank that meets an error prints it.
  const Config cfg = load_config(config_path, overrides);
  const int world = ranks > 0 ? ranks : launcher_world_size();
  validate_for_world(cfg, world);
  check_creatable(cfg.run.out_dir);
  const MachineLimits machine = machine_limits(cfg.run.device);
  check_fits_machine(cfg, machine);
  if (launcher_rank() != 0) return 0;

  std::printf(
      "# ringstep train --dry-run %s\n# The effective config, as %s/config.yaml would hold it, "
      "then what a run of it\n# would need. Nothing was built, run or written.\n",
      config_path.c_str(), cfg.run.out_dir.c_str());
  std::fputs(config_to_yaml(cfg).c_str(), stdout);
  std::printf("# on %d rank%s (%s)\n", world, world == 1 ? "" : "s",
              ranks > 0 ? "--ranks"
                        : "from the launcher's environment, 1 without one; --ranks N to assume "
                          "another count");
  print_model_and_batch(cfg, world);
  print_flops(cfg, world);
  print_memory(cfg, machine);
  std::printf("#   run dir    %s (the dry run writes nothing there)\n", cfg.run.out_dir.c_str());
  if (cfg.run.overwrite)
    std::printf(
        "#   overwrite  --set run.overwrite=true, an action that is never saved: train would "
        "first delete\n#              an earlier run's outputs there\n");
  return 0;
}

}  // namespace ringstep
