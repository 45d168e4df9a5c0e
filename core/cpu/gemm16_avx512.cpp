// The AVX512-BF16 kernel of gemm16, for CPUs with VDPBF16PS but no AMX (AMD Zen 4 and
// later, Intel Cooper Lake). Built with -mavx512f -mavx512bw -mavx512vl -mavx512bf16:
// gemm16.cpp calls it only after CPUID says yes.
//
// One VDPBF16PS adds, to each of 16 fp32 lanes, the dot product of a pair of bf16 values
// of A with a pair of B (Intel SDM vol. 2, VDPBF16PS): on gemm16_tiles.h's layout, a
// broadcast A dword (m, p) against a B tile row (p, n0..n0+15) adds a(m,2p) b(2p,n) +
// a(m,2p+1) b(2p+1,n) to row m of C. A 32 x 32 block of C is four strips of 8 rows x 32
// columns, each 16 zmm accumulators (two B loads and eight broadcasts per k pair), twice
// the multiply-adds per instruction of an fp32 FMA; K goes in chunks that every strip
// sweeps while the chunk's B is in L1 (docs/perf-log.md section 14d).
//
// Exceptions to exact IEEE behaviour, from the hardware: VDPBF16PS treats subnormal bf16
// inputs as zero and flushes subnormal results to zero, whatever MXCSR says.
//
// GCC 12 reports its own _mm512_undefined_* intrinsics as maybe-uninitialized; a known
// false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "core/cpu/gemm16_tiles.h"
#endif

namespace ringstep::cpu::detail {

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)

namespace {

// Dword P of row R of an A tile, as 16 copies of its bf16 pair.
inline __m512bh a_pair(const char* tile, int r, int p) {
  int32_t pair;
  std::memcpy(&pair, tile + r * 64 + p * 4, sizeof(pair));
  return __m512bh(_mm512_set1_epi32(pair));
}

inline __m512bh b_row(const char* tile, int p) {
  return __m512bh(_mm512_load_si512(tile + p * 64));
}

// Rows [8 * strip, 8 * strip + 8) of the block over k tiles [kt0, kt1): 16 accumulators,
// named (GCC keeps an array of vectors on the stack and stores it on every iteration),
// starting from zero when FIRST, else from what out holds (fp32 stored and reloaded: the
// same sums as one uninterrupted run).
void multiply_strip(const char* a_panel, const char* b_panel, int kt0, int kt1, bool first,
                    int strip, float* out, int ld) {
  const size_t a_offset = size_t(strip / 2) * kTileBytes + size_t(strip % 2) * 8 * 64;
  float* o = out + size_t(strip) * 8 * ld;
  auto start = [&](int r, int h) {
    return first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + size_t(r) * ld + 16 * h);
  };
  __m512 c00 = start(0, 0), c01 = start(0, 1), c10 = start(1, 0), c11 = start(1, 1);
  __m512 c20 = start(2, 0), c21 = start(2, 1), c30 = start(3, 0), c31 = start(3, 1);
  __m512 c40 = start(4, 0), c41 = start(4, 1), c50 = start(5, 0), c51 = start(5, 1);
  __m512 c60 = start(6, 0), c61 = start(6, 1), c70 = start(7, 0), c71 = start(7, 1);
  for (int kt = kt0; kt < kt1; ++kt) {
    const char* a = a_panel + size_t(kt) * 2 * kTileBytes + a_offset;
    const char* b = b_panel + size_t(kt) * 2 * kTileBytes;
    for (int p = 0; p < kTileRows; ++p) {
      const __m512bh b0 = b_row(b, p), b1 = b_row(b + kTileBytes, p);
      __m512bh x = a_pair(a, 0, p);
      c00 = _mm512_dpbf16_ps(c00, x, b0);
      c01 = _mm512_dpbf16_ps(c01, x, b1);
      x = a_pair(a, 1, p);
      c10 = _mm512_dpbf16_ps(c10, x, b0);
      c11 = _mm512_dpbf16_ps(c11, x, b1);
      x = a_pair(a, 2, p);
      c20 = _mm512_dpbf16_ps(c20, x, b0);
      c21 = _mm512_dpbf16_ps(c21, x, b1);
      x = a_pair(a, 3, p);
      c30 = _mm512_dpbf16_ps(c30, x, b0);
      c31 = _mm512_dpbf16_ps(c31, x, b1);
      x = a_pair(a, 4, p);
      c40 = _mm512_dpbf16_ps(c40, x, b0);
      c41 = _mm512_dpbf16_ps(c41, x, b1);
      x = a_pair(a, 5, p);
      c50 = _mm512_dpbf16_ps(c50, x, b0);
      c51 = _mm512_dpbf16_ps(c51, x, b1);
      x = a_pair(a, 6, p);
      c60 = _mm512_dpbf16_ps(c60, x, b0);
      c61 = _mm512_dpbf16_ps(c61, x, b1);
      x = a_pair(a, 7, p);
      c70 = _mm512_dpbf16_ps(c70, x, b0);
      c71 = _mm512_dpbf16_ps(c71, x, b1);
    }
  }
  const __m512 rows[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                             {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  for (int r = 0; r < 8; ++r) {
    _mm512_storeu_ps(o + size_t(r) * ld, rows[r][0]);
    _mm512_storeu_ps(o + size_t(r) * ld + 16, rows[r][1]);
  }
}

// gemm16_tiled's kernel: no per-thread state.
struct Avx512Bf16Kernel {
  // Packed B per A panel sweep: half of a Zen 4 core's 1 MiB L2.
  static constexpr size_t kL2ChunkBytes = size_t(1) << 19;

  // K in chunks of this many tiles, each swept by the four strips: the chunk's B (24 KiB)
  // stays in L1 for all four.
  static constexpr int kChunkTiles = 12;

  void multiply(const char* a_panel, const char* b_panel, int k_tiles, float* out, int ld) const {
    for (int kt0 = 0; kt0 < k_tiles; kt0 += kChunkTiles) {
      const int kt1 = std::min(k_tiles, kt0 + kChunkTiles);
      for (int strip = 0; strip < kBlock / 8; ++strip)
        multiply_strip(a_panel, b_panel, kt0, kt1, kt0 == 0, strip, out, ld);
    }
  }
};

}  // namespace

bool avx512_bf16_kernel_compiled() { return true; }

void gemm16_avx512_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const uint16_t* A, int lda, const uint16_t* B, int ldb,
                        const char* b_packed, float beta, float* C, int ldc, const float* bias) {
  gemm16_tiled<Avx512Bf16Kernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, b_packed, beta,
                                 C, ldc, bias);
}

size_t packed_b_bytes_avx512(int K, int N) { return packed_b_bytes(K, N); }

void pack_b_avx512(bool trans_b, int K, int N, const uint16_t* B, int ldb, char* dst) {
  pack_b_tiles(trans_b, K, N, B, ldb, dst);
}

#else  // the compiler cannot build AVX512-BF16 code: gemm16 never takes this kernel

bool avx512_bf16_kernel_compiled() { return false; }

void gemm16_avx512_bf16(bool, bool, int, int, int, float, const uint16_t*, int, const uint16_t*,
                        int, const char*, float, float*, int, const float*) {
  std::abort();  // unreachable: gemm16 checks the kernel was compiled first
}

size_t packed_b_bytes_avx512(int, int) { std::abort(); }

void pack_b_avx512(bool, int, int, const uint16_t*, int, char*) { std::abort(); }

#endif

}  // namespace ringstep::cpu::detail
