// The tiled layout and driver shared by gemm16's bf16 kernels, internal to core/cpu/:
// gemm16_amx.cpp (AMX tiles) and gemm16_avx512.cpp (AVX512-BF16 dot products). Include it
// only from a file built with AVX-512 F/BW/VL: everything here has internal linkage, so
// each includer gets its own copy compiled with its own flags.
//
// Both operands are packed once per call into panels of 32 rows (op(A)) or 32 columns
// (op(B)) over the whole K, zero-padded to multiples of 32 in M, N and K, as tiles of 16
// rows of 64 bytes, i.e. 16 x 16 dwords, each dword a pair of consecutive k ("VNNI" layout,
// the operands of AMX's TDPBF16PS and of AVX512-BF16's VDPBF16PS):
//   A tile: dword (m, p) = (a(m, 2p), a(m, 2p+1))          rows m, k pairs along the row
//   B tile: dword (p, n) = (b(2p, n), b(2p+1, n))          rows k pairs, n along the row
// A source whose k is contiguous (A untransposed, B transposed) already reads as dwords
// (r, p); a source whose k is the row index (A transposed, B untransposed) reads as dwords
// (p, r) after interleaving rows 2p and 2p+1. The A tile wants (m, p) and the B tile (p, n),
// so packing is at most one 16 x 16 dword transpose per tile.
//
// Each 32 x 32 block of C is one run of the kernel's panel product over all K; padded rows
// and columns of C are computed and never stored. Blocks go A panel by A panel, each
// sweeping a chunk of B panels that stays in L2.
//
// Determinism: every C element is the kernel's sum over the K tiles in increasing order, in
// one panel product, whatever the thread count or buffer addresses; threads split blocks of
// C, never K.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace ringstep::cpu::detail {
namespace {

constexpr int kTileRows = 16;     // rows of every tile; also the dwords per row
constexpr int kTileK = 32;        // bf16 values of k in one tile row (64 bytes)
constexpr int kTileBytes = 1024;  // 16 rows x 64 bytes
constexpr int kBlock = 32;        // C is computed in 32 x 32 blocks of 2 x 2 tiles
// Below this many multiply-adds one thread is faster than an OpenMP fork/join.
constexpr double kParallelMinMacs = double(1 << 22);

// A 64-byte-aligned scratch buffer that only grows (thread_local: one per thread and use).
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data_); }

  char* get(size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      capacity_ = (bytes + 63) / 64 * 64;
      data_ = static_cast<char*>(std::aligned_alloc(64, capacity_));
      if (data_ == nullptr) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
    }
    return data_;
  }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// In-register transpose of a 16 x 16 dword matrix, one row per register: 32-bit then
// 64-bit unpacks transpose the 4 x 4 blocks inside each 128-bit lane, two rounds of
// 128-bit lane shuffles transpose the 4 x 4 matrix of lanes. 48 shuffles.
void transpose_16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + j], lane L = column 4L + j of rows 4g..4g+3.
  __m512i u[16];
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // Row 4L + j of the result = lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);  // l0 l2 of both
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);  // l1 l3 of both
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[0 + j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// A stored 16-bit matrix seen as rows r (m of op(A), n of op(B)) by depth k. k_contiguous:
// element (r, k) is at p[r * ld + k]; otherwise at p[k * ld + r].
struct Operand {
  const uint16_t* p;
  int ld;
  bool k_contiguous;
};

// Packs rows [r0, r0 + rows) x depth [k0, k0 + depth) of op (rows <= 16, depth <= 32, the
// rest zero) into one tile at dst: dword (r, p) with transpose false, (p, r) with true.
void pack_tile(const Operand& op, int r0, int rows, int k0, int depth, bool transpose, char* dst) {
  __m512i reg[16];
  if (op.k_contiguous) {
    // Register r = row r: its 32 k values are 16 dwords (r, p).
    const __mmask32 k_mask = depth >= kTileK ? ~__mmask32{0} : (__mmask32{1} << depth) - 1;
    const uint16_t* src = op.p + size_t(r0) * op.ld + k0;
    for (int r = 0; r < kTileRows; ++r) {
      reg[r] = r < rows ? _mm512_maskz_loadu_epi16(k_mask, src + size_t(r) * op.ld)
                        : _mm512_setzero_si512();
    }
  } else {
    // Register p = rows 2p and 2p+1 of the source interleaved: dwords (p, r).
    const __mmask16 r_mask = rows >= kTileRows ? __mmask16(0xFFFF) : (__mmask16(1) << rows) - 1;
    const uint16_t* src = op.p + size_t(k0) * op.ld + r0;
    for (int p = 0; p < kTileRows; ++p) {
      const int k = 2 * p;
      const __m256i even = k < depth ? _mm256_maskz_loadu_epi16(r_mask, src + size_t(k) * op.ld)
                                     : _mm256_setzero_si256();
      const __m256i odd = k + 1 < depth
                              ? _mm256_maskz_loadu_epi16(r_mask, src + size_t(k + 1) * op.ld)
                              : _mm256_setzero_si256();
      reg[p] = _mm512_or_si512(_mm512_cvtepu16_epi32(even),
                               _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
    }
  }
  if (transpose) transpose_16x16_epi32(reg);
  for (int i = 0; i < kTileRows; ++i) _mm512_store_si512(dst + i * 64, reg[i]);
}

// Packs rows [0, rows) of op over all of K into panels of 32 rows (zero-padded) at dst: tile
// (panel, k tile, half) at dst + panel * panel_bytes + (2 * k tile + half) * 1 KiB, the order
// the micro-kernel reads them. Tiles are visited in the order that reads the source row by
// row (a k-strided source: all panels of one k tile before the next), so the hardware
// prefetchers see long sequential streams. An orphaned `omp for`: inside a parallel region
// the calling team shares the tiles.
void pack_operand(const Operand& op, int rows, int K, bool transpose, size_t panel_bytes,
                  char* dst) {
  const int panels = (rows + kBlock - 1) / kBlock, k_tiles = (K + kTileK - 1) / kTileK;
  const int outer = op.k_contiguous ? panels : k_tiles;
  const int inner = op.k_contiguous ? k_tiles : panels;
#pragma omp for schedule(static)
  for (int o = 0; o < outer; ++o) {
    for (int i = 0; i < inner; ++i) {
      const int panel = op.k_contiguous ? o : i, kt = op.k_contiguous ? i : o;
      const int k0 = kt * kTileK, depth = std::min(kTileK, K - k0);
      for (int half = 0; half < 2; ++half) {
        const int r0 = panel * kBlock + half * kTileRows;
        const int tile_rows = std::min(kTileRows, rows - r0);
        char* tile = dst + panel * panel_bytes + size_t(2 * kt + half) * kTileBytes;
        if (tile_rows <= 0) {
          std::fill(tile, tile + kTileBytes, char{0});
        } else {
          pack_tile(op, r0, tile_rows, k0, depth, transpose, tile);
        }
      }
    }
  }
}

// Bytes of op(B) (K x N) packed as panels of 32 columns over all of K.
size_t packed_b_bytes(int K, int N) {
  const int k_tiles = (K + kTileK - 1) / kTileK, n_panels = (N + kBlock - 1) / kBlock;
  return size_t(k_tiles) * 2 * kTileBytes * n_panels;
}

// op(B) packed into dst (packed_b_bytes(K, N), 64-byte aligned) as gemm16_tiled packs it,
// by the whole pool when it is large.
void pack_b_tiles(bool trans_b, int K, int N, const uint16_t* B, int ldb, char* dst) {
  const Operand b{B, ldb, trans_b};
  const size_t panel_bytes = size_t((K + kTileK - 1) / kTileK) * 2 * kTileBytes;
#pragma omp parallel if (double(N) * K >= double(1 << 16))
  pack_operand(b, N, K, b.k_contiguous, panel_bytes, dst);
}

// C block = alpha * acc + beta * C block + bias on rows x cols (<= 32 x 32), with bias[j]
// (the block's first column on; none when null) added last, as sgemm does (sgemm.h); beta
// == 0 never reads C.
void store_block(const float* acc, int rows, int cols, float alpha, float beta, const float* bias,
                 float* C, int ldc) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int i = 0; i < rows; ++i) {
    float* c = C + size_t(i) * ldc;
    for (int h = 0; h < kBlock / 16 && cols - 16 * h > 0; ++h) {
      const int n = cols - 16 * h;
      const __mmask16 mask = n >= 16 ? __mmask16(0xFFFF) : (__mmask16(1) << n) - 1;
      // The rounding builtin, not _mm512_mul_ps: GCC may fuse a plain vector multiply into
      // the add below (-ffp-contract=fast), which would round once where sgemm rounds twice.
      __m512 v = _mm512_mul_round_ps(va, _mm512_load_ps(acc + i * kBlock + 16 * h),
                                     _MM_FROUND_CUR_DIRECTION);
      if (beta == 1.0f) {
        v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c + 16 * h), v);
      } else if (beta != 0.0f) {
        v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, c + 16 * h), v);
      }
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + 16 * h));
      _mm512_mask_storeu_ps(c + 16 * h, mask, v);
    }
  }
}

// C[M x N] = alpha * op(A) * op(B) + beta * C + bias on 16-bit bf16 operands, gemm16's contract
// (gemm16.h), with op(B) packed by pack_b_tiles when B_PACKED is set (then B and ldb are
// not read). KERNEL, constructed once per thread inside the parallel region (its
// constructor and destructor set up and release per-thread state), provides
//   static constexpr size_t kL2ChunkBytes: the packed B swept per A panel;
//   void multiply(a_panel, b_panel, k_tiles, out, ld): out (32 x 32 fp32, row stride ld
//     floats) = the packed A panel times the packed B panel.
template <class Kernel>
void gemm16_tiled(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A,
                  int lda, const uint16_t* B, int ldb, const char* b_packed_in, float beta,
                  float* C, int ldc, const float* bias) {
  const Operand a{A, lda, !trans_a}, b{B, ldb, trans_b};
  const int k_tiles = (K + kTileK - 1) / kTileK;
  const int m_panels = (M + kBlock - 1) / kBlock, n_panels = (N + kBlock - 1) / kBlock;
  const size_t panel_bytes = size_t(k_tiles) * 2 * kTileBytes;
  static thread_local ScratchBuffer a_scratch, b_scratch;
  char* a_packed = a_scratch.get(panel_bytes * m_panels);
  const char* b_packed =
      b_packed_in != nullptr ? b_packed_in : b_scratch.get(panel_bytes * n_panels);
  const int n_chunks =
      int((panel_bytes * n_panels + Kernel::kL2ChunkBytes - 1) / Kernel::kL2ChunkBytes);
  const int chunk_panels = (n_panels + n_chunks - 1) / n_chunks;
  const bool parallel = double(M) * N * K >= kParallelMinMacs;
  // C = A B (the forward): full blocks go from the kernel straight into C, which saves a
  // 4 KiB round trip through acc per block (docs/perf-log.md section 7).
  const bool store_direct = alpha == 1.0f && beta == 0.0f && bias == nullptr;

#pragma omp parallel if (parallel)
  {
    // The A tile wants dwords (m, p), the B tile (p, n); a k-contiguous source reads as
    // (r, p), so A transposes when k is not contiguous and B when it is.
    pack_operand(a, M, K, !a.k_contiguous, panel_bytes, a_packed);
    if (b_packed_in == nullptr)
      pack_operand(b, N, K, b.k_contiguous, panel_bytes, const_cast<char*>(b_packed));
    // (implicit barrier after each: both operands are packed)
    alignas(64) float acc[kBlock * kBlock];
    const Kernel kernel;
    // B in chunks of panels that stay in L2; within a chunk, consecutive blocks of a
    // thread share their A panel (L1) and sweep the chunk. Chunks are independent: nowait.
    for (int n_first = 0; n_first < n_panels; n_first += chunk_panels) {
      const int n_count = std::min(chunk_panels, n_panels - n_first);
#pragma omp for collapse(2) schedule(static) nowait
      for (int mb = 0; mb < m_panels; ++mb) {
        for (int j = 0; j < n_count; ++j) {
          const int nb = n_first + j, m0 = mb * kBlock, n0 = nb * kBlock;
          const int rows = std::min(kBlock, M - m0), cols = std::min(kBlock, N - n0);
          const char* a_panel = a_packed + mb * panel_bytes;
          const char* b_panel = b_packed + nb * panel_bytes;
          float* c = C + size_t(m0) * ldc + n0;
          if (store_direct && rows == kBlock && cols == kBlock) {
            kernel.multiply(a_panel, b_panel, k_tiles, c, ldc);
          } else {
            kernel.multiply(a_panel, b_panel, k_tiles, acc, kBlock);
            store_block(acc, rows, cols, alpha, beta, bias != nullptr ? bias + n0 : nullptr, c,
                        ldc);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringstep::cpu::detail
