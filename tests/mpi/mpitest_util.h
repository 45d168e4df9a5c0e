// Buffers of any dtype, test inputs and cross-rank checks shared by the multi-rank tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace ringstep::testing {

class Buffer {
 public:
  Buffer(DType dt, size_t count) : dt_(dt), count_(count), bytes_(count * dtype_size(dt)) {}
  void set(size_t i, float v) {
    if (dt_ == DType::f32) {
      std::memcpy(&bytes_[i * 4], &v, 4);
    } else {
      const uint16_t h = dt_ == DType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      std::memcpy(&bytes_[i * 2], &h, 2);
    }
  }
  float get(size_t i) const {
    if (dt_ == DType::f32) {
      float v;
      std::memcpy(&v, &bytes_[i * 4], 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, &bytes_[i * 2], 2);
    return dt_ == DType::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t count() const { return count_; }
  size_t bytes() const { return bytes_.size(); }
  DType dtype() const { return dt_; }
  bool same_bits(const Buffer& o, size_t i) const {
    const size_t es = dtype_size(dt_);
    return std::memcmp(&bytes_[i * es], &o.bytes_[i * es], es) == 0;
  }

 private:
  DType dt_;
  size_t count_;
  std::vector<std::byte> bytes_;
};

// The value a dtype stores for v.
inline float rounded(DType dt, float v) {
  if (dt == DType::f16) return fp16_to_fp32(fp32_to_fp16(v));
  if (dt == DType::bf16) return bf16_to_fp32(fp32_to_bf16(v));
  return v;
}

// Position- and rank-dependent, not exactly summable: a signed 24-bit integer times a
// power of two in [2^-23, 2^-18] from a hash, so that sums need rounding. Built without
// arithmetic rounding (ldexp is exact), so no compiler contraction can change a value.
inline float wavy_value(int rank, size_t i) {
  uint64_t h =
      (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const int mantissa = static_cast<int>(h & 0xFFFFFF) - 0x800000;
  const int exponent = static_cast<int>((h >> 24) % 6) - 23;
  return std::ldexp(static_cast<float>(mantissa), exponent);
}

// Small integers times a power of two of the position: sums exact in any order and dtype.
inline float exact_value(int rank, size_t i) {
  const int small = static_cast<int>((i * 5 + 3 * static_cast<size_t>(rank)) % 9) - 4;
  return std::ldexp(static_cast<float>(small), static_cast<int>(i % 5) - 2);
}

// Inputs for max and min: wavy values, with ties every few elements that a reduction must
// break the same way on every rank: +0 on even ranks and -0 on odd ones, or one value on
// every rank.
inline float extreme_value(int rank, size_t i) {
  if (i % 17 == 5) return rank % 2 ? -0.0f : 0.0f;
  if (i % 13 == 3) return 1.5f;
  return wavy_value(rank, i);
}

// The exact max (or min) over N ranks of the stored extreme_value(r, i), with -0 < +0.
inline float extreme_reference(DType dt, ReduceOp op, int n, size_t i) {
  auto less = [](float a, float b) {
    return a < b || (a == b && std::signbit(a) && !std::signbit(b));
  };
  float best = rounded(dt, extreme_value(0, i));
  for (int r = 1; r < n; ++r) {
    const float v = rounded(dt, extreme_value(r, i));
    if (op == ReduceOp::max ? less(best, v) : less(v, best)) best = v;
  }
  return best;
}

// Fills buf with this rank's extreme_value inputs and expected with the exact max or min.
inline void fill_extreme(Buffer& buf, Buffer& expected, int rank, int n, ReduceOp op) {
  for (size_t i = 0; i < buf.count(); ++i) {
    buf.set(i, extreme_value(rank, i));
    expected.set(i, extreme_reference(buf.dtype(), op, n, i));
  }
}

// Unit roundoff of the arithmetic each hop rounds to.
inline double unit_roundoff(DType dt) {
  return dt == DType::f32   ? std::ldexp(1.0, -24)
         : dt == DType::f16 ? std::ldexp(1.0, -11)
                            : std::ldexp(1.0, -8);
}

inline uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// True when every rank holds the same bytes.
inline bool identical_on_all_ranks(Communicator& comm, const void* data, size_t bytes) {
  std::vector<uint64_t> hashes(static_cast<size_t>(comm.size()));
  hashes[static_cast<size_t>(comm.rank())] = fnv1a(data, bytes);
  comm.allgather_bytes(hashes.data(), sizeof(uint64_t));
  for (uint64_t h : hashes)
    if (h != hashes[0]) return false;
  return true;
}

// Logical AND over ranks (so that all ranks agree on whether to continue).
// An empty temporary directory "ringstep_PREFIX_NAME_WORLDSIZE" for a test on COMM's ranks:
// rank 0 clears it, every rank waits for that.
inline std::filesystem::path fresh_dir(Communicator& comm, const std::string& prefix,
                                       const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("ringstep_" + prefix + "_" + name + "_" + std::to_string(comm.size()));
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
  comm.barrier();
  return dir;
}

inline bool all_ranks(Communicator& comm, bool ok) {
  std::vector<int> v(static_cast<size_t>(comm.size()));
  v[static_cast<size_t>(comm.rank())] = ok ? 1 : 0;
  comm.allgather_bytes(v.data(), sizeof(int));
  for (int x : v)
    if (!x) return false;
  return true;
}

}  // namespace ringstep::testing
