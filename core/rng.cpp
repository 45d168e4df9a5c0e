// Philox-4x32-10 with the constants of Random123 (philox.h): multipliers from the paper's
// Table 2, Weyl key increments from the golden ratio and sqrt(3) - 1.
#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace ringstep {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline uint32_t lo32(uint64_t x) { return static_cast<uint32_t>(x); }
inline uint32_t hi32(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

// 53 random bits from two words, scaled into [0, 1).
inline double to_unit_f64(uint32_t a, uint32_t b) {
  const uint64_t bits53 = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);
  return static_cast<double>(bits53) * 0x1p-53;
}

}  // namespace

std::array<uint32_t, 4> Philox::block(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  std::array<uint32_t, 4> c = {lo32(counter_lo), hi32(counter_lo), lo32(counter_hi),
                               hi32(counter_hi)};
  uint32_t k0 = lo32(key), k1 = hi32(key);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {hi32(p1) ^ c[1] ^ k0, lo32(p1), hi32(p0) ^ c[3] ^ k1, lo32(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

uint32_t rng_u32(uint64_t seed, uint64_t stream, uint64_t index) {
  return Philox::block(seed, stream, index)[0];
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  // The top 24 bits fill a float mantissa exactly, so the result never rounds up to 1.
  return static_cast<float>(rng_u32(seed, stream, index) >> 8) * 0x1p-24f;
}

double rng_uniform_f64(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto w = Philox::block(seed, stream, index);
  return to_unit_f64(w[0], w[1]);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  // Box-Muller in double: u1 in (0, 1] keeps the log finite; one of the pair is used so
  // that element i needs only block i.
  const auto w = Philox::block(seed, stream, index);
  const double u1 = 1.0 - to_unit_f64(w[0], w[1]);
  const double u2 = to_unit_f64(w[2], w[3]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

void fill_normal(float* out, size_t n, float stddev, uint64_t seed, uint64_t stream) {
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (count > (1 << 16))
  for (int64_t i = 0; i < count; ++i) {
    out[i] = stddev * rng_normal(seed, stream, static_cast<uint64_t>(i));
  }
}

}  // namespace ringstep
