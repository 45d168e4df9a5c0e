// The AMX bf16 kernel of gemm16 (Intel SDM vol. 1, ch. 18 "Intel AMX"; Intel Optimization
// Reference Manual, ch. 20). Built with -mamx-tile -mamx-bf16 and AVX-512: gemm16.cpp calls
// it only after CPUID and the kernel's tile permission say yes.
//
// One TDPBF16PS multiplies a 16 x 32 bf16 tile of op(A) by a 32 x 16 bf16 tile of op(B) and
// adds into a 16 x 16 fp32 tile: C(i, j) += sum over k pairs of a(i,2p) b(2p,j) +
// a(i,2p+1) b(2p+1,j), products exact, sums in fp32. The tiles are gemm16_tiles.h's layout;
// each 32 x 32 block of C is a 2 x 2 tile micro-kernel over all K (4 C tiles, 2 A and 2 B
// tiles: all 8 tile registers). Where the time goes (micro-kernel, packing, writing C) is
// measured in docs/perf-log.md section 7.
//
// Exceptions to exact IEEE behaviour, from the hardware: TDPBF16PS treats subnormal bf16
// inputs as zero and flushes subnormal results to zero, whatever MXCSR says.
//
// GCC 12 reports its own _mm512_undefined_* intrinsics as maybe-uninitialized; a known
// false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "core/cpu/gemm16_tiles.h"
#endif

namespace ringstep::cpu::detail {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)

namespace {

// The 64-byte tile configuration of palette 1 (SDM vol. 1, 18.2.2): every tile used here
// is 16 rows x 64 bytes. Tiles 0-3 accumulate C, 4-5 hold A, 6-7 hold B.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = kTileRows;
    }
  }
};
static_assert(sizeof(TileConfig) == 64);

// gemm16_tiled's kernel: holds the tile configuration for the life of a thread's share.
struct AmxKernel {
  // Packed B per A panel sweep: stays in the 2 MiB L2 next to the A panel and C (a
  // 1536 x 1024 B is 3 MiB and would stream from L3 for every A panel).
  static constexpr size_t kL2ChunkBytes = size_t(1) << 20;

  AmxKernel() {
    const TileConfig config;
    _tile_loadconfig(&config);
  }
  ~AmxKernel() { _tile_release(); }
  AmxKernel(const AmxKernel&) = delete;
  AmxKernel& operator=(const AmxKernel&) = delete;

  // out (32 x 32 fp32, row stride ld floats) = the packed A panel times the packed B panel.
  void multiply(const char* a_panel, const char* b_panel, int k_tiles, float* out, int ld) const {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const char* a = a_panel + size_t(kt) * 2 * kTileBytes;
      const char* b = b_panel + size_t(kt) * 2 * kTileBytes;
      _tile_loadd(4, a, 64);
      _tile_loadd(6, b, 64);
      _tile_loadd(5, a + kTileBytes, 64);
      _tile_loadd(7, b + kTileBytes, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    const int stride_bytes = ld * int(sizeof(float));
    _tile_stored(0, out, stride_bytes);
    _tile_stored(1, out + 16, stride_bytes);
    _tile_stored(2, out + size_t(16) * ld, stride_bytes);
    _tile_stored(3, out + size_t(16) * ld + 16, stride_bytes);
  }
};

}  // namespace

bool amx_kernel_compiled() { return true; }

void gemm16_amx_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                     const uint16_t* A, int lda, const uint16_t* B, int ldb, const char* b_packed,
                     float beta, float* C, int ldc, const float* bias) {
  gemm16_tiled<AmxKernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, b_packed, beta, C, ldc,
                          bias);
}

size_t packed_b_bytes_amx(int K, int N) { return packed_b_bytes(K, N); }

void pack_b_amx(bool trans_b, int K, int N, const uint16_t* B, int ldb, char* dst) {
  pack_b_tiles(trans_b, K, N, B, ldb, dst);
}

#else  // the compiler cannot build AMX code: gemm16 never takes the AMX kernel

bool amx_kernel_compiled() { return false; }

void gemm16_amx_bf16(bool, bool, int, int, int, float, const uint16_t*, int, const uint16_t*, int,
                     const char*, float, float*, int, const float*) {
  std::abort();  // unreachable: gemm16 checks the kernel was compiled first
}

size_t packed_b_bytes_amx(int, int) { std::abort(); }

void pack_b_amx(bool, int, int, const uint16_t*, int, char*) { std::abort(); }

#endif

}  // namespace ringstep::cpu::detail
