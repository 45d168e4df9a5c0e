// Storage dtypes and their conversions. fp32 <-> fp16/bf16 round to nearest even and keep
// inf and NaN (a NaN stays a NaN, its sign kept); values beyond fp16's range become inf,
// as they would on a GPU. Plain functions, no state, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace ringstep {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2 };
constexpr auto enum_names(DType) {
  return std::to_array<EnumName<DType>>(
      {{DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}});
}

size_t dtype_size(DType dt);
inline const char* dtype_name(DType dt) { return name(dt); }  // "fp32", "bf16", "fp16"
// Parses "fp32" | "bf16" | "fp16"; throws InputError otherwise.
inline DType parse_dtype(const std::string& text) { return parse_name<DType>(text, "dtype"); }

uint16_t fp32_to_fp16(float x);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float x);
float bf16_to_fp32(uint16_t b);

// Array conversions (vectorised where the CPU allows it).
void fp32_to_fp16(const float* in, uint16_t* out, size_t n);
void fp16_to_fp32(const uint16_t* in, float* out, size_t n);
void fp32_to_bf16(const float* in, uint16_t* out, size_t n);
void bf16_to_fp32(const uint16_t* in, float* out, size_t n);

// The same for a 16-bit dtype chosen at run time (DT = f16 or bf16).
void widen_to_fp32(DType dt, const uint16_t* in, float* out, size_t n);
void narrow_from_fp32(DType dt, const float* in, uint16_t* out, size_t n);
// OUT = IN rounded to DT and widened back (widen_to_fp32 of narrow_from_fp32, bit for bit)
// in one pass; IN == OUT is allowed.
void round_to_dtype(DType dt, const float* in, float* out, size_t n);

}  // namespace ringstep
