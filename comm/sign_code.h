// 1-bit Adam's sign code element by element, as the GPU's kernels (comm/nccl/sign_kernels.h)
// compute it and their CPU twins check it against comm/sign_allreduce.h's code, bit for bit:
// the bit of an element, the +-scale it decodes to, the error it leaves (error feedback),
// a scale's sum in its fixed order, and a warp ballot's 32 bits as packed bytes. The format
// is comm/sign_allreduce.h's: element i is bit i mod 8 of byte i / 8, a set bit means
// x[i] < 0 (0, -0 and NaN are +); a scale's sum runs in double over runs of kScaleRun
// elements, each run's element i in lane i mod 16, the lanes combined in order, then the
// run's tail, the runs added in order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace ringstep::sign_code {

constexpr int kLanes = 16;  // a run's sum: element i in lane i mod kLanes

// The code's bit of X: 1 where X < 0.
RINGSTEP_HD unsigned negative(float x) { return x < 0 ? 1u : 0u; }

// +S, or -S where BIT is set: S with its sign bit flipped, no arithmetic.
RINGSTEP_HD float signed_scale(float s, unsigned bit) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(__float_as_uint(s) ^ (bit << 31));
#else
  uint32_t u;
  std::memcpy(&u, &s, sizeof u);
  u ^= uint32_t(bit) << 31;
  float out;
  std::memcpy(&out, &u, sizeof out);
  return out;
#endif
}

// The error the code leaves at Z with scale S: z - s sign(z) (the new error buffer's value).
RINGSTEP_HD float error_after(float z, float s) { return z - signed_scale(s, negative(z)); }

// One element's term of a scale's sum, in double: |v| for mean_abs, v^2 for l2.
RINGSTEP_HD double scale_term(float v, bool mean_abs) {
  const double d = v;
  return mean_abs ? fabs(d) : d * d;
}

// The sum of one run Z[0, n) (n <= kScaleRun) in the fixed order: lane l adds elements
// l, l + 16, ... of the whole groups of 16 in turn; the lanes are combined in lane order;
// then the tail is added. LANE_SUMS (kLanes of them) may come from 16 threads.
RINGSTEP_HD double lane_sum(const float* z, size_t n, bool mean_abs, int lane) {
  const size_t whole = n / kLanes * kLanes;
  double acc = 0;
  for (size_t i = size_t(lane); i < whole; i += kLanes) acc += scale_term(z[i], mean_abs);
  return acc;
}
RINGSTEP_HD double combine_run(const double* lane_sums, const float* z, size_t n, bool mean_abs) {
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lane_sums[l];
  for (size_t i = n / kLanes * kLanes; i < n; ++i) sum += scale_term(z[i], mean_abs);
  return sum;
}

// The fp32 scale of N elements from the sum of their runs (added in run order).
RINGSTEP_HD float scale_from_sum(double sum, size_t n, bool mean_abs) {
  if (n == 0) return 0.0f;
  return mean_abs ? float(sum / double(n)) : float(sqrt(sum / double(n)));
}

// Byte B (0..3) of a warp's ballot WORD over elements 32w .. 32w + 31: packed byte 4w + B.
RINGSTEP_HD uint8_t ballot_byte(uint32_t word, int b) { return uint8_t(word >> (8 * b)); }

}  // namespace ringstep::sign_code
