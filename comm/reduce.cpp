#include "comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

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

// Ties (equal values, or +0 and -0) and NaNs resolve the same way whichever operand comes
// first; see ReduceOp.
float larger(float a, float b) {
  if (a > b) return a;
  if (b > a) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a + b;
}
float smaller(float a, float b) {
  if (a < b) return a;
  if (b < a) return b;
  if (a == b) return std::signbit(a) ? a : b;
  return a + b;
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

// a = f(a, b) block by block in fp32; B may be null (then f sees no second operand).
template <class T, class F>
void combine_16(uint16_t* a, const uint16_t* b, size_t n, F f) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    T::to_f32(a + i, fa, m);
    if (b) T::to_f32(b + i, fb, m);
    f(fa, fb, m);
    T::from_f32(fa, a + i, m);
  }
}

// Runs the fp32 kernel f(float* a, const float* b, size_t n) on buffers of dtype DT.
template <class F>
void on_fp32(DType dt, void* a, const void* b, size_t n, F f) {
  auto* a16 = static_cast<uint16_t*>(a);
  auto* b16 = static_cast<const uint16_t*>(b);
  switch (dt) {
    case DType::f32:
      return f(static_cast<float*>(a), static_cast<const float*>(b), n);
    case DType::f16:
      return combine_16<F16>(a16, b16, n, f);
    case DType::bf16:
      return combine_16<BF16>(a16, b16, n, f);
  }
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

void reduce_sum(void* inout, const void* in, size_t count, DType dt, float divisor) {
  on_fp32(dt, inout, in, count,
          [divisor](float* a, const float* b, size_t n) { add_f32(a, b, n, divisor); });
}

void reduce(ReduceOp op, void* inout, const void* in, size_t count, DType dt, float divisor) {
  if (op == ReduceOp::sum) return reduce_sum(inout, in, count, dt, divisor);
  if (divisor != 1.0f)
    throw std::invalid_argument(std::string("reduce: a divisor only averages a sum, not a ") +
                                reduce_op_name(op));
  const auto pick = op == ReduceOp::max ? &larger : &smaller;
  on_fp32(dt, inout, in, count, [pick](float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; ++i) a[i] = pick(a[i], b[i]);
  });
}

void divide_by(void* buf, size_t count, DType dt, float divisor) {
  if (divisor == 1.0f) return;
  on_fp32(dt, buf, nullptr, count,
          [divisor](float* a, const float*, size_t n) { div_f32(a, n, divisor); });
}

}  // namespace ringstep
