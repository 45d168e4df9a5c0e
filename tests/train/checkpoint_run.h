// The resume-equivalence runs shared by the one-rank and multi-rank checkpoint tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "core/config.h"
#include "train/trainer.h"

namespace ringstep::testing {

struct ResumeRuns {
  TrainOutcome straight;  // 20 steps in one train()
  TrainOutcome resumed;   // steps 11-20, resumed from the checkpoint a 10-step run saved
};

// Runs BASE 20 steps straight into DIR/straight, and as 10 steps then a second train()
// resuming for the remaining 10 into DIR/split. DIR must not hold earlier runs. The LR
// schedule is constant: it is computed from train.steps, so a cosine run configured for 10
// steps would decay differently from the first 10 steps of a 20-step one.
inline ResumeRuns RunStraightAndResumed(Config base, const std::filesystem::path& dir,
                                        Communicator* comm) {
  base.train.schedule = LrScheduleKind::constant;
  base.checkpoint.every = 10;  // the straight run saves too: saving must not change a run
  base.train.steps = 20;
  base.run.out_dir = (dir / "straight").string();
  ResumeRuns r;
  r.straight = train(base, comm);
  base.run.out_dir = (dir / "split").string();
  base.train.steps = 10;
  train(base, comm);
  base.train.steps = 20;
  r.resumed = train(base, comm);
  return r;
}

// Steps 11-20 of R.resumed are those of R.straight, bit for bit: losses, loss scales,
// skipped steps and the final parameters.
inline void ExpectResumedMatchesStraight(const ResumeRuns& r) {
  EXPECT_EQ(r.resumed.resumed_step, 10);
  ASSERT_EQ(r.straight.losses.size(), 20u);
  ASSERT_EQ(r.resumed.losses.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(r.resumed.losses[i], r.straight.losses[10 + i]) << "step " << 11 + i;
    EXPECT_EQ(r.resumed.loss_scales[i], r.straight.loss_scales[10 + i]) << "step " << 11 + i;
  }
  EXPECT_EQ(r.resumed.params_fnv1a64, r.straight.params_fnv1a64);
  EXPECT_EQ(r.resumed.optimizer_steps, r.straight.optimizer_steps);
  EXPECT_EQ(r.resumed.skipped_steps, r.straight.skipped_steps);
}

// fp16 with dynamic loss scaling whose state is mid-way at step 10: skips at the start
// (the scale is too large), growth every 3 clean steps, hysteresis 2.
inline Config Fp16Dynamic(Config c) {
  c.precision.dtype = DType::f16;
  c.precision.loss_scale.mode = LossScaleMode::dynamic;
  c.precision.loss_scale.initial = 0x1p24;
  c.precision.loss_scale.growth_interval = 3;
  c.precision.loss_scale.hysteresis = 2;
  return c;
}

}  // namespace ringstep::testing
