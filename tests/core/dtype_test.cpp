#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace ringstep {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
bool fp16_is_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Value of a non-negative finite fp16 pattern, computed from the IEEE definition.
double fp16_value(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  if (exp == 0) return std::ldexp(mant, -24);
  return std::ldexp(1024 + mant, exp - 25);
}

// Round-to-nearest-even fp16 of a finite float, found by searching the fp16 grid in double.
uint16_t reference_fp16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double d = std::fabs(static_cast<double>(x));
  if (d >= 65520.0) return sign | 0x7C00;
  uint16_t lo = 0, hi = 0x7BFF;  // largest pattern with value <= d, by bisection
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (fp16_value(mid) <= d) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  if (lo == 0x7BFF) return sign | lo;
  const double below = d - fp16_value(lo);
  const double above = fp16_value(static_cast<uint16_t>(lo + 1)) - d;
  if (below < above || (below == above && (lo & 1) == 0)) return sign | lo;
  return static_cast<uint16_t>(sign | (lo + 1));
}

TEST(Dtype, NamesAndSizes) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(parse_dtype(dtype_name(dt)), dt);
  }
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
}

TEST(Dtype, ParseRejectsUnknownNameListingValidOnes) {
  try {
    parse_dtype("float16");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("float16"), std::string::npos) << msg;
    for (const char* name : {"fp32", "fp16", "bf16"}) {
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
}

TEST(Dtype, Fp16AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = fp16_to_fp32(h);
    const uint16_t back = fp32_to_fp16(f);
    if (fp16_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(fp16_is_nan(back)) << std::hex << i;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
    } else {
      EXPECT_EQ(back, h) << std::hex << i;
      if ((h & 0x7C00) != 0x7C00) {
        EXPECT_EQ(static_cast<double>(std::fabs(f)), fp16_value(h & 0x7FFF)) << std::hex << i;
      }
    }
  }
}

TEST(Dtype, Bf16AllPatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = bf16_to_fp32(b);
    const uint16_t back = fp32_to_bf16(f);
    if (bf16_is_nan(b)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << i;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << std::hex << i;
    } else {
      EXPECT_EQ(back, b) << std::hex << i;
    }
  }
}

TEST(Dtype, Fp16RoundingMatchesDoubleReference) {
  std::mt19937 gen(42);
  std::uniform_int_distribution<uint32_t> any;
  // Half the samples span fp16's range densely (exponents 2^-28 .. 2^17); the rest are
  // arbitrary bit patterns, which mostly under- or overflow.
  std::uniform_int_distribution<uint32_t> exp(127 - 28, 127 + 17);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t b = any(gen);
    if (i % 2 == 0) b = (b & 0x807FFFFFu) | (exp(gen) << 23);
    const float x = from_bits(b);
    if (std::isnan(x)) continue;
    ASSERT_EQ(fp32_to_fp16(x), reference_fp16(x)) << std::hex << b;
  }
}

TEST(Dtype, Fp16TiesGoToEven) {
  // Midpoints between neighbouring fp16 values need 12 significant bits: exact in fp32.
  for (uint16_t h = 0; h < 0x7BFF; ++h) {
    const double mid = (fp16_value(h) + fp16_value(static_cast<uint16_t>(h + 1))) / 2;
    const float x = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(x), mid);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : h;
    ASSERT_EQ(fp32_to_fp16(x), even) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(-x), even | 0x8000) << std::hex << h;
    // One fp32 ulp either side breaks the tie.
    ASSERT_EQ(fp32_to_fp16(std::nextafter(x, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(x, 1e6f)), h + 1) << std::hex << h;
  }
}

TEST(Dtype, Fp16OverflowInfAndNaN) {
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-65520.0f), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7C00)));
  // NaNs stay quiet NaNs with their sign, even when the payload lies in dropped bits.
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FBFFFFFu, 0xFFC01234u}) {
    const uint16_t h = fp32_to_fp16(from_bits(nan));
    EXPECT_TRUE(fp16_is_nan(h)) << std::hex << nan;
    EXPECT_EQ(h & 0x200, 0x200) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << std::hex << nan;
  }
  EXPECT_EQ(bits(fp16_to_fp32(0x7C01)), 0x7FC02000u);  // signalling NaN comes back quiet
  EXPECT_EQ(bits(fp16_to_fp32(0xFE00)), 0xFFC00000u);
}

TEST(Dtype, Fp16Subnormals) {
  const float tiny = 0x1p-24f;  // smallest fp16 subnormal
  EXPECT_EQ(fp16_to_fp32(0x0001), tiny);
  EXPECT_EQ(fp16_to_fp32(0x8001), -tiny);
  EXPECT_EQ(fp16_to_fp32(0x03FF), 1023 * tiny);
  EXPECT_EQ(fp16_to_fp32(0x0400), 0x1p-14f);
  EXPECT_EQ(fp32_to_fp16(tiny), 0x0001);
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);  // tie between 0 and tiny: even is 0
  EXPECT_EQ(fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(1.5f * tiny), 0x0002);  // tie between 1 and 2: even is 2
  EXPECT_EQ(fp32_to_fp16(2.5f * tiny), 0x0002);
  EXPECT_EQ(fp32_to_fp16(1023.5f * tiny), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Dtype, Bf16RoundingAndSpecials) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);  // subnormal tie to even 0
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(bf16_to_fp32(0x0001), from_bits(0x00010000u));
  // A NaN whose payload is all in the dropped bits must not round or truncate to inf.
  for (uint32_t nan : {0x7F800001u, 0x7F80FFFFu, 0xFFFFFFFFu, 0x7FFFFFFFu, 0xFF800001u}) {
    const uint16_t b = fp32_to_bf16(from_bits(nan));
    EXPECT_TRUE(bf16_is_nan(b)) << std::hex << nan;
    EXPECT_EQ(b >> 15, nan >> 31) << std::hex << nan;
  }
}

// Random bit patterns with specials sprinkled in: zeros, infs, NaNs, subnormals, ties.
std::vector<float> tricky_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<uint32_t> exp(127 - 30, 127 + 17);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                               0x7FC00000u, 0x7F800001u, 0xFFBFFFFFu, 0x00000001u,
                               0x33000000u, 0x477FF000u, 0x477FEFFFu, 0x3F808000u,
                               0x387FE000u, 0x7F7FFFFFu, 0x00018000u, 0x7F80FFFFu};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b = any(gen);
    if (i % 7 == 0) {
      b = specials[b % 16];
    } else if (i % 2 == 0) {
      b = (b & 0x807FFFFFu) | (exp(gen) << 23);
    }
    v[i] = from_bits(b);
  }
  return v;
}

TEST(Dtype, ArrayConversionsMatchScalar) {
  for (size_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 1003, 65537}) {
    const std::vector<float> in = tricky_floats(n, static_cast<uint32_t>(n));
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> hf(n), bf(n);
    fp32_to_fp16(in.data(), h.data(), n);
    fp32_to_bf16(in.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], fp32_to_fp16(in[i])) << "n=" << n << " i=" << i;
      ASSERT_EQ(b[i], fp32_to_bf16(in[i])) << "n=" << n << " i=" << i;
    }
    // Widen every 16-bit pattern too, not only those a narrowing produces.
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(bits(in[i]) >> (i % 17));
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint16_t>(bits(in[i]) >> (i % 17));
    fp16_to_fp32(h.data(), hf.data(), n);
    bf16_to_fp32(b.data(), bf.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits(hf[i]), bits(fp16_to_fp32(h[i]))) << "n=" << n << " i=" << i;
      ASSERT_EQ(bits(bf[i]), bits(bf16_to_fp32(b[i]))) << "n=" << n << " i=" << i;
    }
  }
}

// round_to_dtype is narrow then widen, bit for bit (NaNs, infs, subnormals, ties, fp16
// overflow), across its internal chunks and in place.
TEST(Dtype, RoundToDtypeIsNarrowThenWiden) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (size_t n : {0, 1, 17, 511, 512, 513, 1025, 65537}) {
      const std::vector<float> in = tricky_floats(n, static_cast<uint32_t>(n) + 7);
      std::vector<uint16_t> h(n);
      std::vector<float> ref(n), out(n), inplace = in;
      narrow_from_fp32(dt, in.data(), h.data(), n);
      widen_to_fp32(dt, h.data(), ref.data(), n);
      round_to_dtype(dt, in.data(), out.data(), n);
      round_to_dtype(dt, inplace.data(), inplace.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits(out[i]), bits(ref[i])) << dtype_name(dt) << " n=" << n << " i=" << i;
        ASSERT_EQ(bits(inplace[i]), bits(ref[i])) << dtype_name(dt) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Dtype, ArrayFp16WidensEveryPatternLikeScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  fp16_to_fp32(all.data(), out.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bits(out[i]), bits(fp16_to_fp32(all[i]))) << std::hex << i;
  }
}

}  // namespace
}  // namespace ringstep
