#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace ringstep {
namespace {

using Words = std::array<uint32_t, 4>;

uint64_t join(uint32_t hi, uint32_t lo) { return (static_cast<uint64_t>(hi) << 32) | lo; }

// Known answers from Random123's kat_vectors (philox4x32 10 rounds); counter words and
// key words are listed low word first there.
TEST(Rng, PhiloxKnownAnswers) {
  EXPECT_EQ(Philox::block(0, 0, 0), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox::block(~0ull, ~0ull, ~0ull),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox::block(join(0x299f31d0, 0xa4093822), join(0x03707344, 0x13198a2e),
                          join(0x85a308d3, 0x243f6a88)),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, UniformMeanAndVariance) {
  constexpr int kN = 1000000;
  double sum = 0, sum_sq = 0, sum64 = 0, sum64_sq = 0;
  float lo = 1, hi = 0;
  for (int i = 0; i < kN; ++i) {
    const float u = rng_uniform(7, 3, i);
    const double d = rng_uniform_f64(7, 3, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
    sum64 += d;
    sum64_sq += d * d;
  }
  // Standard errors: mean ~2.9e-4, variance ~7.5e-5; tolerances are several of them.
  EXPECT_NEAR(sum / kN, 0.5, 2e-3);
  EXPECT_NEAR(sum_sq / kN - (sum / kN) * (sum / kN), 1.0 / 12, 5e-4);
  EXPECT_NEAR(sum64 / kN, 0.5, 2e-3);
  EXPECT_NEAR(sum64_sq / kN - (sum64 / kN) * (sum64 / kN), 1.0 / 12, 5e-4);
  EXPECT_LT(lo, 1e-4f);
  EXPECT_GT(hi, 1 - 1e-4f);
}

TEST(Rng, NormalMeanAndStd) {
  constexpr size_t kN = 1000000;
  std::vector<float> v(kN);
  fill_normal(v.data(), kN, 2.0f, 11, 0);
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double mean = sum / kN;
  EXPECT_NEAR(mean, 0.0, 1e-2);  // standard error 2e-3
  EXPECT_NEAR(std::sqrt(sum_sq / kN - mean * mean), 2.0, 1e-2);
}

TEST(Rng, DeterministicAndIndexAddressed) {
  EXPECT_EQ(rng_u32(1, 2, 3), rng_u32(1, 2, 3));
  EXPECT_NE(rng_u32(1, 2, 3), rng_u32(1, 2, 4));
  EXPECT_NE(rng_u32(1, 2, 3), rng_u32(1, 3, 3));
  EXPECT_NE(rng_u32(1, 2, 3), rng_u32(2, 2, 3));
  // fill_normal is element-wise rng_normal, whatever the length or thread split.
  std::vector<float> big(200000), small(1000);
  fill_normal(big.data(), big.size(), 0.5f, 99, 4);
  fill_normal(small.data(), small.size(), 0.5f, 99, 4);
  for (size_t i = 0; i < small.size(); ++i) ASSERT_EQ(small[i], big[i]);
  for (size_t i : {0ul, 1ul, 12345ul, 199999ul}) {
    ASSERT_EQ(big[i], 0.5f * rng_normal(99, 4, i));
  }
  std::vector<float> other(1000);
  fill_normal(other.data(), other.size(), 0.5f, 99, 5);
  EXPECT_NE(other, small);
}

}  // namespace
}  // namespace ringstep
