// The GPU sign code's per-element math (comm/sign_code.h) against comm/sign_allreduce.h's
// 1-bit code, bit for bit, on the CPU: the kernels' loops (comm/nccl/sign_kernels.cu) run
// here as plain C++ with the same functions. Same signs: 32-bit ballot words give
// pack_signs' bytes. Same scales: 16 lane sums per run, combined in order, give
// sign_scale's bits for both kinds, one run and many, with a tail. Same errors: z = x + e,
// then z - s sign z, is what SignAllreduce::encode leaves in its error buffer.
#include "comm/sign_code.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "comm/sign_allreduce.h"

namespace ringstep {
namespace {

namespace sc = sign_code;

// Values of many sizes and both signs, with 0, -0, NaN and denormals among them.
std::vector<float> values(size_t n, unsigned seed) {
  std::vector<float> v(n);
  uint64_t h = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    const int mantissa = int(h & 0xFFFFFF) - 0x800000;
    v[i] = std::ldexp(float(mantissa), int((h >> 24) % 40) - 40);
  }
  if (n > 3) {
    v[1] = 0.0f;
    v[2] = -0.0f;
    v[3] = std::numeric_limits<float>::quiet_NaN();
  }
  if (n > 4) v[4] = -std::numeric_limits<float>::denorm_min();
  return v;
}

// code_kernel's packing: per warp of 32 elements (+0 past N) one ballot word, bytes 0..3.
std::vector<uint8_t> ballot_pack(const std::vector<float>& z) {
  const size_t n = z.size(), bytes = (n + 7) / 8;
  std::vector<uint8_t> out(bytes, 0xAB);
  for (size_t w = 0; w * 32 < n; ++w) {
    uint32_t word = 0;
    for (int lane = 0; lane < 32; ++lane) {
      const size_t i = w * 32 + size_t(lane);
      word |= uint32_t(sc::negative(i < n ? z[i] : 0.0f)) << lane;
    }
    for (int b = 0; b < 4; ++b)
      if (w * 4 + size_t(b) < bytes) out[w * 4 + size_t(b)] = sc::ballot_byte(word, b);
  }
  return out;
}

// launch_scale's order: runs of kScaleRun, 16 lane sums each, combined, runs added in order.
float kernel_scale(const std::vector<float>& z, OneBitScale kind) {
  const bool mean_abs = kind == OneBitScale::mean_abs;
  double sum = 0;
  for (size_t begin = 0; begin < z.size(); begin += kScaleRun) {
    const size_t len = std::min(kScaleRun, z.size() - begin);
    double lanes[sc::kLanes];
    for (int l = 0; l < sc::kLanes; ++l)
      lanes[l] = sc::lane_sum(z.data() + begin, len, mean_abs, l);
    sum += sc::combine_run(lanes, z.data() + begin, len, mean_abs);
  }
  return sc::scale_from_sum(sum, z.size(), mean_abs);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

const std::vector<size_t> kCounts = {
    1, 7, 8, 31, 32, 33, 100, 1000, kScaleRun - 1, kScaleRun, kScaleRun + 17, 3 * kScaleRun + 5};

TEST(SignCodeGpu, BallotWordsGivePackSignsBytes) {
  for (size_t n : kCounts) {
    const std::vector<float> z = values(n, unsigned(n));
    std::vector<uint8_t> ref((n + 7) / 8, 0xCD);
    pack_signs(z.data(), n, ref.data());
    EXPECT_EQ(ballot_pack(z), ref) << "n " << n;
  }
}

TEST(SignCodeGpu, LaneSumsGiveSignScaleBitForBit) {
  for (size_t n : kCounts) {
    std::vector<float> z = values(n, unsigned(n) + 7);
    for (float& v : z)
      if (std::isnan(v)) v = 0.25f;
    for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2})
      EXPECT_EQ(bits_of(kernel_scale(z, kind)), bits_of(sign_scale(z.data(), n, kind)))
          << "n " << n << " kind " << int(kind);
  }
}

TEST(SignCodeGpu, DecodedValueIsTheScaleWithTheBitsSign) {
  const std::vector<float> z = values(1000, 3);
  std::vector<uint8_t> packed((z.size() + 7) / 8);
  pack_signs(z.data(), z.size(), packed.data());
  std::vector<float> ref(z.size());
  unpack_signs(packed.data(), z.size(), 0.375f, ref.data());
  for (size_t i = 0; i < z.size(); ++i)
    EXPECT_EQ(bits_of(sc::signed_scale(0.375f, sc::negative(z[i]))), bits_of(ref[i])) << i;
}

// One segment on one rank: encode forms z = x + e, its scale, the bits and the new error.
// The kernels' steps (add_error, scale, code) leave the same error buffer, bit for bit, over
// three calls (the error carries over).
TEST(SignCodeGpu, ErrorFeedbackMatchesEncode) {
  for (size_t n : {size_t{1000}, kScaleRun + 17}) {
    for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
      SignAllreduce code(n, {n}, 1, 0, kind);
      std::vector<float> ref_error(n, 0.0f), error(n, 0.0f);
      for (unsigned call = 0; call < 3; ++call) {
        std::vector<float> x = values(n, 100 + call);
        for (float& v : x)
          if (std::isnan(v)) v = -0.5f;
        code.encode(x.data(), ref_error.data());
        for (size_t i = 0; i < n; ++i) error[i] = x[i] + error[i];               // add_error_kernel
        const float s = kernel_scale(error, kind);                               // launch_scale
        for (size_t i = 0; i < n; ++i) error[i] = sc::error_after(error[i], s);  // code_kernel
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += bits_of(error[i]) != bits_of(ref_error[i]);
        EXPECT_EQ(wrong, 0u) << "n " << n << " kind " << int(kind) << " call " << call;
      }
    }
  }
}

}  // namespace
}  // namespace ringstep
