// N values drawn from a standard normal by a std::mt19937 seeded with SEED: the same values
// on every run, for tests that feed kernels and their twins random inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ringstep::testing {

inline std::vector<float> normal_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

}  // namespace ringstep::testing
