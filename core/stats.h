// Statistics shared by the run's writer (the trainer's summary, the per-step `ranks` block)
// and its reader (`ringstep report`), so that both compute the same numbers. Pure functions.
#pragma once

#include <vector>

namespace ringstep {

// The Q-quantile (0..1) by linear interpolation between order statistics (numpy's default);
// 0 for no values.
double percentile(std::vector<double> v, double q);

// Leading steps left out of the percentiles and the breakdown (page faults, cold caches):
// max(1, min(5, steps/10)), but never all of them.
int warmup_steps_excluded(int steps);

}  // namespace ringstep
