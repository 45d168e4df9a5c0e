#include "comm/reduce.h"

#include <algorithm>
#include <cstdint>

namespace ringstep {
namespace {

void add_f32(float* __restrict a, const float* __restrict b, size_t n, float divisor) {
  if (divisor == 1.0f) {
    for (size_t i = 0; i < n; ++i) a[i] += b[i];
  } else {
    for (size_t i = 0; i < n; ++i) a[i] = (a[i] + b[i]) / divisor;
  }
}

void div_f32(float* a, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) a[i] /= divisor;
}

// 16-bit buffers go through fp32 staging in blocks small enough to stay in L1; each call
// rounds once (round to nearest even, core/dtype.h).
struct F16 {
  static void to_f32(const uint16_t* in, float* out, size_t n) { fp16_to_fp32(in, out, n); }
  static void from_f32(const float* in, uint16_t* out, size_t n) { fp32_to_fp16(in, out, n); }
};
struct BF16 {
  static void to_f32(const uint16_t* in, float* out, size_t n) { bf16_to_fp32(in, out, n); }
  static void from_f32(const float* in, uint16_t* out, size_t n) { fp32_to_bf16(in, out, n); }
};
constexpr size_t kBlock = 512;

template <class T>
void add_16(uint16_t* a, const uint16_t* b, size_t n, float divisor) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    T::to_f32(a + i, fa, m);
    T::to_f32(b + i, fb, m);
    add_f32(fa, fb, m, divisor);
    T::from_f32(fa, a + i, m);
  }
}

template <class T>
void div_16(uint16_t* a, size_t n, float divisor) {
  alignas(64) float fa[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    T::to_f32(a + i, fa, m);
    div_f32(fa, m, divisor);
    T::from_f32(fa, a + i, m);
  }
}

}  // namespace

void reduce_sum(void* inout, const void* in, size_t count, DType dt, float divisor) {
  auto* a16 = static_cast<uint16_t*>(inout);
  auto* b16 = static_cast<const uint16_t*>(in);
  switch (dt) {
    case DType::f32:
      return add_f32(static_cast<float*>(inout), static_cast<const float*>(in), count, divisor);
    case DType::f16:
      return add_16<F16>(a16, b16, count, divisor);
    case DType::bf16:
      return add_16<BF16>(a16, b16, count, divisor);
  }
}

void divide_by(void* buf, size_t count, DType dt, float divisor) {
  if (divisor == 1.0f) return;
  switch (dt) {
    case DType::f32:
      return div_f32(static_cast<float*>(buf), count, divisor);
    case DType::f16:
      return div_16<F16>(static_cast<uint16_t*>(buf), count, divisor);
    case DType::bf16:
      return div_16<BF16>(static_cast<uint16_t*>(buf), count, divisor);
  }
}

}  // namespace ringstep
