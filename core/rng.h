// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011). Every value is a pure function of (seed, stream, index),
// so results do not depend on thread count or call order. Stateless and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ringstep {

struct Philox {
  // One 10-round block. key = (k1:k0) and counter = (c3:c2 = counter_hi, c1:c0 =
  // counter_lo), low words first; output words in Random123's order.
  static std::array<uint32_t, 4> block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);
};

// Each (seed, stream, index) owns one Philox block: key = seed, counter = (stream, index).
// The helpers read overlapping words of that block, so two helpers called with the same
// arguments are not independent of each other; use different streams for that.
uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index);
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);       // [0, 1), 24 bits
double rng_uniform_f64(uint64_t seed, uint64_t stream, uint64_t index);  // [0, 1), 53 bits
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);        // N(0, 1), Box-Muller

// out[i] = stddev * rng_normal(seed, stream, i) for i in [0, n); parallel with OpenMP.
void fill_normal(float* out, size_t n, float stddev, uint64_t seed, uint64_t stream);

}  // namespace ringstep
