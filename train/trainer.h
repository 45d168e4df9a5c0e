// The training loop: gradient accumulation over micro-batches, gradient reduction across
// ranks, clipping, AdamW and the LR schedule, evaluation on the held-out stream, and the
// logs (header, one line and one steps.jsonl record per step, summary.json at the end).
// Everything that can be checked is checked before the run directory is created, so a bad
// config or data file leaves nothing half-written.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ringstep {

class Communicator;

struct TrainOutcome {
  std::vector<float> losses;  // training loss of each step
  float final_val_loss = 0;
};

// Runs CFG to completion. COMM may be null (one rank). Throws InputError for bad input.
TrainOutcome train(const Config& cfg, Communicator* comm);

}  // namespace ringstep
