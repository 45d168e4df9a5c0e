// Bit-exact software conversions plus vectorised array loops. The scalar functions define
// the results; the array versions must reproduce them bit for bit, including NaN payloads,
// which is why NaNs are quieted the way x86 F16C quiets them (quiet bit set, payload
// truncated or widened, sign kept).
#include "core/dtype.h"

#include <algorithm>
#include <bit>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ringstep {

size_t dtype_size(DType dt) { return dt == DType::f32 ? 4 : 2; }

uint16_t fp32_to_fp16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u | ((abs >> 13) & 0x3FFu);  // NaN, quieted
  // 65520 = 0x477FF000 is halfway between 65504 (max fp16) and 2^16: ties go to the even
  // neighbour, which is the overflow. Infinity lands here too.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  if (abs < 0x38800000u) {                // below 2^-14: fp16 subnormal or zero
    if (abs <= 0x33000000u) return sign;  // at most 2^-25, half the smallest subnormal
    // Value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e), shift in [14, 24].
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - (abs >> 23);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
  // a mantissa carry correctly bumps the exponent.
  const uint32_t rebiased = abs - 0x38000000u;
  return static_cast<uint16_t>(sign | ((rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13));
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {
    const uint32_t nan_bits = mant ? 0x7FC00000u | (mant << 13) : 0x7F800000u;
    return std::bit_cast<float>(sign | nan_bits);
  }
  if (exp == 0) {
    // mant * 2^-24 is exact in fp32, so no normalisation loop is needed.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(mag));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// The fp32 bits of BITS rounded to bf16, the low 16 bits cleared: the one bf16 rounding
// rule (fp32_to_bf16 keeps the high half, round_to_dtype all of it). Round to nearest even
// on the 16 dropped bits; overflow carries into inf, and subnormals need no special case
// because bf16 shares fp32's exponent. Truncating a NaN whose payload sits in the low 16
// bits would give inf, so a NaN keeps its sign and top payload bits and gets the quiet
// bit. Branch-free, so a plain loop of it vectorises.
uint32_t round_bits_to_bf16(uint32_t bits) {
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  return nan ? (bits & 0xFFFF0000u) | 0x00400000u : rounded;
}

}  // namespace

uint16_t fp32_to_bf16(float x) {
  return static_cast<uint16_t>(round_bits_to_bf16(std::bit_cast<uint32_t>(x)) >> 16);
}

float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// GCC 12 warns that _mm512_cvtps_ph and _mm512_cvtph_ps read an uninitialised vector
// (their own _mm*_undefined_* placeholder, GCC bug 105593); the warning is spurious.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
void fp32_to_fp16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(__F16C__) || defined(__AVX512F__)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), kRound);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRound);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = fp32_to_fp16(in[i]);
}

void fp16_to_fp32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = fp16_to_fp32(in[i]);
}
#pragma GCC diagnostic pop

// bf16 has no usable x86 instruction: AVX512-BF16's vcvtneps2bf16 flushes subnormals to
// zero, so the rounding is done with integer ops.
// The AVX-512 loops below are the scalar functions written with integer vector ops.
void fp32_to_bf16(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(in + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs_mask), inf);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, round), lsb), 16);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
#endif
  for (; i < n; ++i) out[i] = fp32_to_bf16(in[i]);
}

void bf16_to_fp32(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#endif
  for (; i < n; ++i) out[i] = bf16_to_fp32(in[i]);
}

void widen_to_fp32(DType dt, const uint16_t* in, float* out, size_t n) {
  if (dt == DType::bf16)
    bf16_to_fp32(in, out, n);
  else
    fp16_to_fp32(in, out, n);
}

void narrow_from_fp32(DType dt, const float* in, uint16_t* out, size_t n) {
  if (dt == DType::bf16)
    fp32_to_bf16(in, out, n);
  else
    fp32_to_fp16(in, out, n);
}

void round_to_dtype(DType dt, const float* in, float* out, size_t n) {
  if (dt == DType::bf16) {
    for (size_t i = 0; i < n; ++i)
      out[i] = std::bit_cast<float>(round_bits_to_bf16(std::bit_cast<uint32_t>(in[i])));
    return;
  }
  constexpr size_t kChunk = 512;  // the 16-bit bits of one chunk stay in L1
  uint16_t bits[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t len = std::min(kChunk, n - i);
    narrow_from_fp32(dt, in + i, bits, len);
    widen_to_fp32(dt, bits, out + i, len);
  }
}

}  // namespace ringstep
