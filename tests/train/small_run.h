// A training config small enough for unit and multi-rank tests: a 2-layer width-32 GPT,
// 2 x 2 sequences of 16 tokens per rank, no evaluation until the end, one thread, and a
// fixed peak so the start-up SGEMM measurement is skipped.
#pragma once

#include <string>

#include "core/config.h"

namespace ringstep::testing {

inline Config SmallRun(const std::string& out_dir, int steps) {
  Config cfg = parse_config("", "test");
  cfg.model = {64, 16, 32, 2, 2};
  cfg.train.steps = steps;
  cfg.train.micro_batch = 2;
  cfg.train.grad_accum_steps = 2;
  cfg.train.warmup_steps = 1;
  cfg.train.eval_every = 0;
  cfg.train.eval_batches = 1;
  cfg.run.out_dir = out_dir;
  cfg.run.threads = 1;
  cfg.profile.peak_gflops = 100;
  return cfg;
}

}  // namespace ringstep::testing
