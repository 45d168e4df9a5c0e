// Random token batches for the model tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ringstep {

struct Batch {
  std::vector<int32_t> in, tg;
};

// B x T inputs and targets drawn uniformly from [0, V), the same for the same seed.
inline Batch MakeBatch(int B, int T, int V, unsigned seed) {
  std::mt19937 gen(seed);
  Batch b{std::vector<int32_t>(size_t(B) * T), std::vector<int32_t>(size_t(B) * T)};
  for (auto& x : b.in) x = int32_t(gen() % V);
  for (auto& x : b.tg) x = int32_t(gen() % V);
  return b;
}

}  // namespace ringstep
