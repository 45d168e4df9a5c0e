// The training loop: gradient accumulation over micro-batches, gradient reduction across
// ranks, clipping, AdamW and the LR schedule, evaluation on the held-out stream, and the
// logs (header, one line and one steps.jsonl record per step, summary.json at the end).
// Everything that can be checked is checked before the run directory is created, so a bad
// config or data file leaves nothing half-written.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"

namespace ringstep {

class Communicator;

struct TrainOutcome {
  std::vector<float> losses;        // training loss of each logged step
  std::vector<double> loss_scales;  // the loss scale each step ran with
  int skipped_steps = 0;            // steps skipped for inf/NaN gradients
  int64_t optimizer_steps = 0;      // steps applied (Adam's step count)
  float final_val_loss = 0;
  uint64_t params_fnv1a64 = 0;      // fnv1a64 of the final parameter buffer's bytes
};

// The run stopped itself (max_consecutive_skips overflowing steps in a row); the message
// says what happened and what to try. The run directory holds every step up to there.
struct TrainingStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs CFG to completion. COMM may be null (one rank). Throws InputError for bad input.
TrainOutcome train(const Config& cfg, Communicator* comm);

}  // namespace ringstep
