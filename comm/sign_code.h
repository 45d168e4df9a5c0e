// 1-bit Adam's sign code element by element, the one home of its arithmetic: the CPU code
// (comm/sign_allreduce.cpp), the GPU's kernels (comm/nccl/sign_kernels.h) and their CPU
// twins (comm/sign_twins.h) all call these: the bit of an element, the +-scale it decodes
// to, the error it leaves (error feedback), a scale's sum in its fixed order, a warp
// ballot's 32 bits as packed bytes, the server's sum over ranks and its mean, a scale's
// bytes in a message, and what one thread of each kernel computes. The format is
// comm/sign_allreduce.h's: element i is bit i mod 8 of byte i / 8, a set bit means x[i] < 0
// (0, -0 and NaN are +); a scale's sum runs in double over runs of kScaleRun elements, each
// run's element i in lane i mod 16, the lanes combined in order, then the run's tail, the
// runs added in order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "comm/sign_kernels.h"  // SignTables, SignRuns
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

// Bit I of packed BITS (element I of a message's chunk).
RINGSTEP_HD unsigned packed_bit(const uint8_t* bits, size_t i) {
  return (bits[i / 8] >> (i % 8)) & 1u;
}

// The server's sum over ranks, one term at a time in rank order from +0.0f: ACC plus the
// code's value +-S of a rank's BIT.
RINGSTEP_HD float add_code(float acc, float s, unsigned bit) { return acc + signed_scale(s, bit); }

// The server's z: the mean of its N ranks' sum (fp32 division) plus its error E.
RINGSTEP_HD float server_z(float sum, float n, float e) { return sum / n + e; }

// The fp32 scale stored at P (4 little-endian bytes, any alignment: a message's scale slots
// are 2-byte aligned), and stored there.
RINGSTEP_HD float load_scale(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint32_t u =
      uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  return __uint_as_float(u);
#else
  float s;
  std::memcpy(&s, p, sizeof s);
  return s;
#endif
}
RINGSTEP_HD void store_scale(uint8_t* p, float s) {
#if defined(__CUDA_ARCH__)
  const uint32_t u = __float_as_uint(s);
  for (int b = 0; b < 4; ++b) p[b] = uint8_t(u >> (8 * b));
#else
  std::memcpy(p, &s, sizeof s);
#endif
}

// The segment of element I: the first K with ENDS[K] > I (ENDS ascending, SEGMENTS of them,
// I < ENDS[SEGMENTS - 1]).
RINGSTEP_HD size_t segment_of(const size_t* ends, size_t segments, size_t i) {
  size_t lo = 0, hi = segments;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (ends[mid] > i)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// Byte B (0..3) of a warp's ballot WORD over elements 32w .. 32w + 31: packed byte 4w + B.
RINGSTEP_HD uint8_t ballot_byte(uint32_t word, int b) { return uint8_t(word >> (8 * b)); }

// What one thread of a kernel in comm/sign_kernels.h computes, for the kernel and its twin.

// The scale of part P of R from its runs' sums RUN_SUMS (added in run order).
RINGSTEP_HD float part_scale(const double* run_sums, const SignRuns& r, size_t p, bool mean_abs) {
  const size_t first = r.part_runs[p], last = r.part_runs[p + 1];
  double sum = 0;
  for (size_t q = first; q < last; ++q) sum += run_sums[q];
  const size_t n = last > first ? r.runs[2 * (last - 1) + 1] - r.runs[2 * first] : 0;
  return scale_from_sum(sum, n, mean_abs);
}

// Message J of the buffer MSGS.
RINGSTEP_HD const uint8_t* message(const uint8_t* msgs, const SignTables& t, int j) {
  return msgs + size_t(j) * t.block_bytes;
}

// Where real element I's scale lies in a message of chunk J (its segment's slot), and
// where its bit lies in the packed chunk.
RINGSTEP_HD size_t scale_slot(const SignTables& t, int j, size_t i) {
  return (segment_of(t.ends, t.segments, i) - t.first_segment[j]) * sizeof(float);
}
RINGSTEP_HD unsigned code_bit(const uint8_t* msg, const SignTables& t, int j, size_t i) {
  return packed_bit(msg + t.scale_bytes, i - size_t(j) * t.chunk);
}

// The server's z at element I of chunk R (sign_allreduce.h's server stage): the ranks' +-
// scales summed in rank order from +0.0f, their mean, plus the server error E.
RINGSTEP_HD float server_element(const uint8_t* in, const uint8_t* own, const SignTables& t, int r,
                                 size_t i, float e) {
  const size_t slot = scale_slot(t, r, i);
  float acc = 0.0f;
  for (int q = 0; q < t.nranks; ++q) {
    const uint8_t* msg = q == r ? own : message(in, t, q);
    acc = add_code(acc, load_scale(msg + slot), code_bit(msg, t, r, i));
  }
  return server_z(acc, float(t.nranks), e);
}

// The decoded output at element I from the gathered server messages.
RINGSTEP_HD float decode_element(const uint8_t* gathered, const SignTables& t, size_t i) {
  const int j = int(i / t.chunk);
  const uint8_t* msg = message(gathered, t, j);
  return signed_scale(load_scale(msg + scale_slot(t, j, i)), code_bit(msg, t, j, i));
}

}  // namespace ringstep::sign_code
