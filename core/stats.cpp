#include "core/stats.h"

#include <algorithm>

namespace ringstep {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

int warmup_steps_excluded(int steps) {
  return std::max(0, std::min(std::max(1, std::min(5, steps / 10)), steps - 1));
}

}  // namespace ringstep
