// Our kernel's loops, outermost first (BLIS's names):
//   jc: columns of C in blocks of kBlockCols;
//   pc: k in blocks of kDepth; op(B)[pc, jc] is packed into panels of NR columns, shared
//       by the threads (each packs some panels or rows);
//   ic: rows in chunks of at most kBlockRows, each taken by the next free thread;
//       op(A)[ic, pc] is packed into panels of MR rows (72 x 384 floats: 108 KiB, in L2);
//   jr, ir: one NR-column B panel (384 x NR floats: 24 KiB for NR = 16, in L1; 48 KiB for
//       NR = 32, streamed from L2 at 128 bytes per 24 FMAs) against every MR-row A panel of
//       the block, one micro-kernel call each.
#include "core/cpu/sgemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define RINGSTEP_SGEMM_AVX2 1  // the packers' transposes, and the 6 x 16 micro-kernel
#if defined(__AVX512F__)
#define RINGSTEP_SGEMM_AVX512 1  // the 12 x 32 micro-kernel
#endif
#endif

#ifdef RINGSTEP_HAVE_BLAS
#include <cblas.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ringstep::cpu {
namespace {

// The register block: 12 x 32 in 24 zmm accumulators with AVX-512, 6 x 16 in 12 ymm with
// AVX2 (and the portable kernel). Each leaves room for the B row and a broadcast A value.
#ifdef RINGSTEP_SGEMM_AVX512
constexpr int MR = 12, NR = 32;
#else
constexpr int MR = 6, NR = 16;
#endif
// Measured against 72/144/288 rows and 256/384 deep on small.yaml's shapes (docs/perf-log.md
// sections 14c and 14g).
constexpr int kDepth = 384;
constexpr int kBlockRows = 72;
constexpr int kBlockCols = 4096;
// Below this many multiply-adds a product runs on one thread.
constexpr double kParallelMinMacs = double(1 << 21);

// How a block of C is written: C = alpha * acc + beta * C + bias, as
// fma(beta, C, alpha * acc) + bias[j] with the beta term only when beta != 0 and the bias
// only when set: the same roundings on every path, so edges do not change bits.
struct Write {
  float alpha, beta;
  const float* bias;  // at the block's first column, or null
};

inline float written(float acc, float old, int j, const Write& w) {
  float t = w.alpha * acc;
  if (w.beta != 0.0f) t = std::fma(w.beta, old, t);
  if (w.bias != nullptr) t += w.bias[j];
  return t;
}

// Software prefetch for the packers. They read operands from memory with little work per
// line, several rows ld apart at once, which the hardware prefetchers follow late: without
// it they wait on each line in turn. The packers ask for rows kPrefetchRows ahead (a
// transposed A's short pieces of rows) or kPrefetchAhead floats (four lines) further along
// each row they read.
constexpr int kPrefetchRows = 8;
constexpr int kLineFloats = 16;  // floats in a 64-byte cache line
constexpr int kPrefetchAhead = 4 * kLineFloats;

// The lines holding P[0 : n], towards L1.
void prefetch(const float* p, int n) {
  for (int i = 0; i < n; i += kLineFloats) __builtin_prefetch(p + i);
  __builtin_prefetch(p + n - 1);
}

#ifdef RINGSTEP_SGEMM_AVX2
// Whether a packer reading a row of KC floats, now at K, asks for the line kPrefetchAhead
// further on: once a line, while that line is still in the row.
bool prefetch_due(int k, int kc) { return k % kLineFloats == 0 && k + kPrefetchAhead < kc; }

// The untransposed A's MR rows SRC interleaved into AP (ap[k * MR + r] = src[r][k]), four
// k at a time: a 4 x 4 transpose of each four rows, and pairs for the last two (MR = 6).
// Returns how many k it did (a multiple of 4); the caller does the rest.
int interleave_rows4(const float* const (&src)[MR], int kc, float* ap) {
  static_assert(MR % 4 == 0 || MR % 4 == 2);
  int k = 0;
  for (; k + 4 <= kc; k += 4, ap += 4 * MR) {
    if (prefetch_due(k, kc)) {
      for (int r = 0; r < MR; ++r) __builtin_prefetch(src[r] + k + kPrefetchAhead);
    }
    int r = 0;
    for (; r + 4 <= MR; r += 4) {
      __m128 r0 = _mm_loadu_ps(src[r] + k), r1 = _mm_loadu_ps(src[r + 1] + k);
      __m128 r2 = _mm_loadu_ps(src[r + 2] + k), r3 = _mm_loadu_ps(src[r + 3] + k);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // r0 = rows r..r+3 at k, r1 at k + 1, ...
      _mm_storeu_ps(ap + r, r0);
      _mm_storeu_ps(ap + MR + r, r1);
      _mm_storeu_ps(ap + 2 * MR + r, r2);
      _mm_storeu_ps(ap + 3 * MR + r, r3);
    }
    if (r < MR) {  // rows r and r + 1: (r, k), (r + 1, k), (r, k + 1), ...
      const __m128 x = _mm_loadu_ps(src[r] + k), y = _mm_loadu_ps(src[r + 1] + k);
      const __m128 lo = _mm_unpacklo_ps(x, y), hi = _mm_unpackhi_ps(x, y);
      _mm_storel_pi(reinterpret_cast<__m64*>(ap + r), lo);
      _mm_storeh_pi(reinterpret_cast<__m64*>(ap + MR + r), lo);
      _mm_storel_pi(reinterpret_cast<__m64*>(ap + 2 * MR + r), hi);
      _mm_storeh_pi(reinterpret_cast<__m64*>(ap + 3 * MR + r), hi);
    }
  }
  return k;
}
#endif

// N values of S from element AT on, as fp32: in place, or widened into STAGE.
const float* fetch(const SgemmOperand& s, size_t at, int n, float* stage) {
  if (s.f32 != nullptr) return s.f32 + at;
  widen_to_fp32(s.dt, s.bits + at, stage, size_t(n));
  return stage;
}

// Per-thread room for the widened rows the packers read (16-bit operands only).
float* stage(size_t n) {
  thread_local std::vector<float, Eigen::aligned_allocator<float>> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// op(A)[i0 : i0 + mc, k0 : k0 + kc] as panels of MR rows (the last zero-padded), each
// kc x MR with one k's MR values adjacent.
void pack_a(bool trans, const SgemmOperand& A, int i0, int mc, int k0, int kc, float* ap) {
  float* room = A.f32 != nullptr ? nullptr : stage(size_t(MR) * std::max(kc, mc));
  if (trans) {  // one stored row (a k) at a time, read once from start to end
    const int full = mc / MR * MR;
    for (int k = 0; k < kc; ++k) {
      if (A.f32 != nullptr && k + kPrefetchRows < kc)
        prefetch(A.f32 + size_t(k0 + k + kPrefetchRows) * A.ld + i0, mc);
      const float* src = fetch(A, size_t(k0 + k) * A.ld + i0, mc, room);
      for (int p = 0; p < full; p += MR)
        std::memcpy(ap + size_t(p) * kc + k * MR, src + p, sizeof(float) * MR);
      if (full < mc) {
        float* dst = ap + size_t(full) * kc + k * MR;
        for (int r = 0; r < MR; ++r) dst[r] = full + r < mc ? src[full + r] : 0.0f;
      }
    }
    return;
  }
  for (int p = 0; p < mc; p += MR, ap += size_t(MR) * kc) {  // MR stored rows at a time
    const int rows = std::min(MR, mc - p);
    const float* src[MR];
    for (int r = 0; r < MR; ++r) {
      const int row = i0 + p + std::min(r, rows - 1);
      src[r] = fetch(A, size_t(row) * A.ld + k0, kc, room + size_t(r) * kc);
    }
    int k = 0;
#ifdef RINGSTEP_SGEMM_AVX2
    if (rows == MR) k = interleave_rows4(src, kc, ap);
#endif
    for (; k < kc; ++k)
      for (int r = 0; r < MR; ++r) ap[k * MR + r] = r < rows ? src[r][k] : 0.0f;
  }
}

#ifdef RINGSTEP_SGEMM_AVX2
// dst[k * NR + j] = src[j * ld + k] for j < 8, k < 8: an 8 x 8 transpose in registers.
void transpose8(const float* src, size_t ld, float* dst) {
  __m256 r[8], t[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * ld);
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    r[j] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_store_ps(dst + k * NR, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_store_ps(dst + (k + 4) * NR, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#endif

// Stored row K of an untransposed B, columns [j0, j0 + n), into the rows of consecutive
// panels: columns j0 + q * NR + j at dst[q * panel_stride + j], zero-padded to whole panels.
void pack_b_row(const SgemmOperand& B, int k, int j0, int n, float* dst, size_t panel_stride) {
  const size_t at = size_t(k) * B.ld + j0;
  for (int q = 0; q * NR < n; ++q, dst += panel_stride) {
    const int width = std::min(NR, n - q * NR);
    const size_t from = at + size_t(q) * NR;
    if (B.f32 != nullptr && width == NR) {  // a constant size: inlined as vector moves
      std::memcpy(dst, B.f32 + from, sizeof(float) * NR);
    } else if (B.f32 != nullptr) {
      std::memcpy(dst, B.f32 + from, sizeof(float) * width);
    } else {
      widen_to_fp32(B.dt, B.bits + from, dst, size_t(width));
    }
    std::fill(dst + width, dst + NR, 0.0f);
  }
}

// Columns [j0, j0 + width) (width <= NR) of op(B)[k0 : k0 + kc, :] as one kc x NR panel,
// zero-padded past WIDTH.
void pack_b_panel(bool trans, const SgemmOperand& B, int k0, int kc, int j0, int width,
                  float* dst) {
  int k = 0;
  if (trans) {  // column j of the panel is row j0 + j of the stored B
    const float* src = B.f32 != nullptr ? B.f32 + size_t(j0) * B.ld + k0 : nullptr;
    size_t ld = size_t(B.ld);
    if (src == nullptr) {  // the panel's rows widened, kc apart
      float* room = stage(size_t(NR) * kc);
      for (int j = 0; j < width; ++j)
        fetch(B, size_t(j0 + j) * B.ld + k0, kc, room + size_t(j) * kc);
      src = room;
      ld = size_t(kc);
    }
#ifdef RINGSTEP_SGEMM_AVX2
    if (width == NR) {
      for (; k + 8 <= kc; k += 8) {
        if (prefetch_due(k, kc)) {
          for (int j = 0; j < NR; ++j) __builtin_prefetch(src + j * ld + k + kPrefetchAhead);
        }
        for (int j = 0; j < NR; j += 8) transpose8(src + j * ld + k, ld, dst + k * NR + j);
      }
    }
#endif
    for (; k < kc; ++k)
      for (int j = 0; j < NR; ++j) dst[k * NR + j] = j < width ? src[j * ld + k] : 0.0f;
    return;
  }
  for (; k < kc; ++k) pack_b_row(B, k0 + k, j0, width, dst + k * NR, 0);
}

// Op(B)[k0 : k0 + kc, jc : jc + nc] as panels of kc x NR (panel q at bp + q * kc * NR), the
// work shared by the calling team (an orphaned omp for, with its barrier). An untransposed B
// is read a whole row at a time: one panel's rows are ldb apart, one cache line each on
// another page, which the hardware prefetchers do not follow.
void pack_b_block(bool trans, const SgemmOperand& B, int k0, int kc, int jc, int nc, float* bp) {
  const int panels = (nc + NR - 1) / NR;
  const size_t panel_stride = size_t(kc) * NR;
  if (trans) {
#pragma omp for schedule(static)
    for (int q = 0; q < panels; ++q)
      pack_b_panel(true, B, k0, kc, jc + q * NR, std::min(NR, nc - q * NR), bp + q * panel_stride);
    return;
  }
#pragma omp for schedule(static)
  for (int k = 0; k < kc; ++k) pack_b_row(B, k0 + k, jc, nc, bp + size_t(k) * NR, panel_stride);
}

void write_tile(const float (&acc)[MR][NR], int m, int n, const Write& w, float* c, int ldc) {
  for (int r = 0; r < m; ++r) {
    float* cr = c + size_t(r) * ldc;
    for (int j = 0; j < n; ++j) cr[j] = written(acc[r][j], cr[j], j, w);
  }
}

// Where a register block's operands are read: A(r, k) = a[r * a_row + k * a_k] and
// B(k, j) = b[k * b_k + j]. Packed panels have a_row 1, a_k MR and b_k NR; attention's
// products also read whole blocks in place (gemm_packed).
struct TileOperands {
  const float* a;
  size_t a_row, a_k;
  const float* b;
  size_t b_k;
};

// A(r, k) for the micro-kernels below: rows 1 apart (kUnitRows) or a_row apart.
#define RINGSTEP_SGEMM_A(r) (kUnitRows ? ap[r] : ap[(r)*a_row])

#if defined(RINGSTEP_SGEMM_AVX512)
// One vector register of a row of C, and the operations its write needs.
struct Lanes {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
};
#elif defined(RINGSTEP_SGEMM_AVX2)
struct Lanes {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};
#endif

#ifdef RINGSTEP_SGEMM_AVX2
// The write of C's block from the accumulators (two registers a row): a whole block straight
// from the registers, an edge block through write_tile, with the same roundings.
[[gnu::always_inline]] inline void write_accumulators(const Lanes::V (&acc)[MR][2], int m, int n,
                                                      const Write& w, float* c, int ldc) {
  static_assert(2 * Lanes::kWidth == NR);
  constexpr int W = Lanes::kWidth;
  if (m == MR && n == NR) {
    const Lanes::V alpha = Lanes::set1(w.alpha), beta = Lanes::set1(w.beta);
    for (int r = 0; r < MR; ++r) {
      float* cr = c + size_t(r) * ldc;
      for (int h = 0; h < 2; ++h) {
        Lanes::V t = Lanes::mul(alpha, acc[r][h]);
        if (w.beta != 0.0f) t = Lanes::fmadd(beta, Lanes::load(cr + W * h), t);
        if (w.bias != nullptr) t = Lanes::add(t, Lanes::load(w.bias + W * h));
        Lanes::store(cr + W * h, t);
      }
    }
    return;
  }
  float tile[MR][NR];
  for (int r = 0; r < MR; ++r) {
    Lanes::store(tile[r], acc[r][0]);
    Lanes::store(tile[r] + W, acc[r][1]);
  }
  write_tile(tile, m, n, w, c, ldc);
}
#endif

#if defined(RINGSTEP_SGEMM_AVX512)
// One 12 x 32 block of C from an A panel (kc x 12) and a B panel (kc x 32): two B loads,
// twelve broadcasts and 24 FMAs per k, into 24 named accumulators (an array of __m512
// would live on the stack, as with AVX2 below).
template <bool kUnitRows>
void micro_kernel(int kc, const TileOperands& t, int m, int n, const Write& w, float* c, int ldc) {
  const float* __restrict ap = t.a;
  const float* __restrict bp = t.b;
  const size_t a_row = t.a_row, a_step = kUnitRows ? t.a_k : 1, b_step = t.b_k;
  for (int r = 0; r < m; ++r) {  // C's block is read or written only after the k loop
    const char* cr = reinterpret_cast<const char*>(c + size_t(r) * ldc);
    _mm_prefetch(cr, _MM_HINT_T0);
    _mm_prefetch(cr + 64, _MM_HINT_T0);
    _mm_prefetch(cr + sizeof(float) * (NR - 1), _MM_HINT_T0);
  }
  __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
  __m512 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
  __m512 c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a, c8a = c0a, c8b = c0a;
  __m512 c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a, c11b = c0a;
  for (int k = 0; k < kc; ++k, ap += a_step, bp += b_step) {
    const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#define RINGSTEP_SGEMM_ROW(r)                             \
  do {                                                    \
    const __m512 a = _mm512_set1_ps(RINGSTEP_SGEMM_A(r)); \
    c##r##a = _mm512_fmadd_ps(a, b0, c##r##a);            \
    c##r##b = _mm512_fmadd_ps(a, b1, c##r##b);            \
  } while (0)
    RINGSTEP_SGEMM_ROW(0);
    RINGSTEP_SGEMM_ROW(1);
    RINGSTEP_SGEMM_ROW(2);
    RINGSTEP_SGEMM_ROW(3);
    RINGSTEP_SGEMM_ROW(4);
    RINGSTEP_SGEMM_ROW(5);
    RINGSTEP_SGEMM_ROW(6);
    RINGSTEP_SGEMM_ROW(7);
    RINGSTEP_SGEMM_ROW(8);
    RINGSTEP_SGEMM_ROW(9);
    RINGSTEP_SGEMM_ROW(10);
    RINGSTEP_SGEMM_ROW(11);
#undef RINGSTEP_SGEMM_ROW
  }
  const __m512 acc[MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b},   {c3a, c3b},
                             {c4a, c4b}, {c5a, c5b}, {c6a, c6b},   {c7a, c7b},
                             {c8a, c8b}, {c9a, c9b}, {c10a, c10b}, {c11a, c11b}};
  write_accumulators(acc, m, n, w, c, ldc);
}
#elif defined(RINGSTEP_SGEMM_AVX2)
// One MR x NR block of C from an A panel (kc x MR) and a B panel (kc x NR): two B loads, six
// broadcasts and twelve FMAs per k. The accumulators are named variables, not an array: GCC
// keeps an array of __m256 on the stack and stores it on every iteration.
template <bool kUnitRows>
void micro_kernel(int kc, const TileOperands& t, int m, int n, const Write& w, float* c, int ldc) {
  const float* __restrict ap = t.a;
  const float* __restrict bp = t.b;
  const size_t a_row = t.a_row, a_step = kUnitRows ? t.a_k : 1, b_step = t.b_k;
  // C's block is read or written only after the k loop: its lines arrive meanwhile.
  for (int r = 0; r < m; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + size_t(r) * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + size_t(r) * ldc + NR - 1), _MM_HINT_T0);
  }
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
  for (int k = 0; k < kc; ++k, ap += a_step, bp += b_step) {
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    __m256 a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(0));
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(1));
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(2));
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(3));
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(4));
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(&RINGSTEP_SGEMM_A(5));
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
  }
  const __m256 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
  write_accumulators(acc, m, n, w, c, ldc);
}
#else
// The same block in portable C++ (builds without AVX2 and FMA).
template <bool kUnitRows>
void micro_kernel(int kc, const TileOperands& t, int m, int n, const Write& w, float* c, int ldc) {
  const float* ap = t.a;
  const float* bp = t.b;
  const size_t a_row = t.a_row, a_step = kUnitRows ? t.a_k : 1, b_step = t.b_k;
  float acc[MR][NR] = {};
  for (int k = 0; k < kc; ++k, ap += a_step, bp += b_step) {
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) acc[r][j] = std::fma(RINGSTEP_SGEMM_A(r), bp[j], acc[r][j]);
  }
  write_tile(acc, m, n, w, c, ldc);
}
#endif

#undef RINGSTEP_SGEMM_A

void micro_kernel(int kc, const TileOperands& t, int m, int n, const Write& w, float* c, int ldc) {
  if (t.a_row == 1) return micro_kernel<true>(kc, t, m, n, w, c, ldc);
  micro_kernel<false>(kc, t, m, n, w, c, ldc);
}

// A packed mc x kc block of A times the packed B panels covering N columns (panel q at
// bp + q * panel_stride) into C[0:mc, 0:N].
void macro_kernel(int mc, int N, int kc, const float* ap, const float* bp, size_t panel_stride,
                  const Write& w, float* c, int ldc) {
  for (int q = 0; q * NR < N; ++q) {
    const int n = std::min(NR, N - q * NR);
    const Write wq{w.alpha, w.beta, w.bias != nullptr ? w.bias + q * NR : nullptr};
    for (int p = 0; p < mc; p += MR) {
      const TileOperands t{ap + size_t(p) * kc, 1, MR, bp + q * panel_stride, NR};
      micro_kernel(kc, t, std::min(MR, mc - p), n, wq, c + size_t(p) * ldc + q * NR, ldc);
    }
  }
}

// The write of k block K0: the caller's alpha, beta and bias for the first, accumulation
// after it.
Write block_write(int k0, float alpha, float beta, const float* bias) {
  return k0 == 0 ? Write{alpha, beta, bias} : Write{alpha, 1.0f, nullptr};
}

// C = beta * C + bias, the whole product when K == 0; rows split across the pool when
// PARALLEL.
void scale_c(int M, int N, float beta, const float* bias, float* c, int ldc,
             bool parallel = false) {
  const Write w{0.0f, beta, bias};
#pragma omp parallel for schedule(static) if (parallel)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      c[size_t(i) * ldc + j] = written(0.0f, c[size_t(i) * ldc + j], j, w);
}

float* aligned_scratch(std::vector<float, Eigen::aligned_allocator<float>>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

int product_threads(int M, int N, int K) {
#ifdef _OPENMP
  if (omp_in_parallel() || double(M) * N * K < kParallelMinMacs) return 1;
  return std::min(omp_get_max_threads(), (M + MR - 1) / MR);
#else
  return 1;
#endif
}

// C's rows go in chunks of whole register blocks (so edges fall where one thread's would),
// at most kBlockRows each and as even as whole blocks allow, a multiple of TEAM chunks in
// all. Threads take the next chunk as they free up: a shared VM's cores do not all run at
// one speed, and a fixed split would wait for the slowest. Which thread computes a row does
// not change its bits.
static_assert(kBlockRows % MR == 0);
int row_chunks(int M, int team) {
  const int tiles = (M + MR - 1) / MR, per_chunk = kBlockRows / MR;
  return team * ((tiles + team * per_chunk - 1) / (team * per_chunk));
}

struct Rows {
  int begin, end;
};
Rows chunk_rows(int chunk, int chunks, int M) {
  const int tiles = (M + MR - 1) / MR;
  return {std::min(M, chunk * tiles / chunks * MR), std::min(M, (chunk + 1) * tiles / chunks * MR)};
}

void sgemm_panels(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                  const SgemmOperand& a, const SgemmOperand& b, float beta, float* c, int ldc,
                  const float* bias) {
  thread_local std::vector<float, Eigen::aligned_allocator<float>> b_buf;
  const int max_cols = (std::min(N, kBlockCols) + NR - 1) / NR * NR;
  float* bp = aligned_scratch(b_buf, size_t(kDepth) * max_cols);
  const int threads = product_threads(M, N, K);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
#ifdef _OPENMP
    const int team = omp_get_num_threads();
#else
    const int team = 1;
#endif
    const int chunks = row_chunks(M, team);
    thread_local std::vector<float, Eigen::aligned_allocator<float>> a_buf;
    float* ap = aligned_scratch(a_buf, size_t(kBlockRows) * kDepth);
    for (int jc = 0; jc < N; jc += kBlockCols) {
      const int nc = std::min(kBlockCols, N - jc);
      for (int k0 = 0; k0 < K; k0 += kDepth) {
        const int kc = std::min(kDepth, K - k0);
        pack_b_block(trans_b, b, k0, kc, jc, nc, bp);
        const Write w = block_write(k0, alpha, beta, bias != nullptr ? bias + jc : nullptr);
#pragma omp for schedule(dynamic, 1)
        for (int chunk = 0; chunk < chunks; ++chunk) {
          const Rows rows = chunk_rows(chunk, chunks, M);
          const int i0 = rows.begin, mc = rows.end - rows.begin;
          pack_a(trans_a, a, i0, mc, k0, kc, ap);
          macro_kernel(mc, nc, kc, ap, bp, size_t(kc) * NR, w, c + size_t(i0) * ldc + jc, ldc);
        }  // the loop's barrier: every row's block is done before B is packed again
      }
    }
  }
}

#ifdef RINGSTEP_HAVE_BLAS
void sgemm_openblas(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc,
                    const float* bias) {
  if (bias != nullptr) {  // C = beta * C + bias first, then the product adds onto it
    scale_c(M, N, beta, bias, c, ldc, product_threads(M, N, K) > 1);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

// S as cblas_sgemm reads it, a ROWS x COLS stored matrix: its fp32 values, or its bits
// widened into BUF (dense, leading dim COLS). Sets LD to the leading dim returned.
const float* openblas_operand(const SgemmOperand& s, int rows, int cols, bool parallel,
                              std::vector<float>& buf, int& ld) {
  ld = s.ld;
  if (s.f32 != nullptr) return s.f32;
  buf.resize(std::max<size_t>(buf.size(), size_t(rows) * cols));
#pragma omp parallel for schedule(static) if (parallel)
  for (int r = 0; r < rows; ++r)
    widen_to_fp32(s.dt, s.bits + size_t(r) * s.ld, buf.data() + size_t(r) * cols, size_t(cols));
  ld = cols;
  return buf.data();
}
#endif

// Ours where it has a micro-kernel as wide as OpenBLAS's (AVX2, AVX-512) or there is no
// BLAS.
constexpr bool kOwnByDefault =
#if !defined(RINGSTEP_HAVE_BLAS) || defined(RINGSTEP_SGEMM_AVX2)
    true;
#else
    false;
#endif

bool env_forces_openblas() {
  const char* v = std::getenv("RINGSTEP_SGEMM");
  return v != nullptr && std::string(v) == "openblas";
}

std::atomic<bool>& forced_openblas() {
  static std::atomic<bool> forced{env_forces_openblas()};
  return forced;
}

bool use_own_kernel() {
#ifdef RINGSTEP_HAVE_BLAS
  return kOwnByDefault && !forced_openblas().load(std::memory_order_relaxed);
#else
  return true;
#endif
}

// Where a register block needs sums: the k range [lo, hi) of depth block [k0, k0 + kc)
// for rows [i, i + m) and columns from j of the product, under TRI (sgemm.h).
struct Depth {
  int lo, hi;
};
Depth tile_depth(const Triangle& tri, int i, int m, int j, int k0, int kc) {
  switch (tri.kind) {
    case Triangle::c_lower:
      return j > i + m - 1 + tri.diag ? Depth{0, 0} : Depth{0, kc};
    case Triangle::a_lower:
      return {0, std::clamp(i + m + tri.diag - k0, 0, kc)};
    case Triangle::a_upper:
      return {std::clamp(i - tri.diag - k0, 0, kc), kc};
    case Triangle::none:
      break;
  }
  return {0, kc};
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const SgemmOperand& a,
           const SgemmOperand& b, float beta, float* c, int ldc, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, bias, c, ldc);
#ifdef RINGSTEP_HAVE_BLAS
  if (!use_own_kernel()) {
    thread_local std::vector<float> a_buf, b_buf;
    const bool parallel = product_threads(M, N, K) > 1;
    int lda = 0, ldb = 0;  // stored shapes: A is K x M when transposed, B is N x K
    const float* af = openblas_operand(a, trans_a ? K : M, trans_a ? M : K, parallel, a_buf, lda);
    const float* bf = openblas_operand(b, trans_b ? N : K, trans_b ? K : N, parallel, b_buf, ldb);
    return sgemm_openblas(trans_a, trans_b, M, N, K, alpha, af, lda, bf, ldb, beta, c, ldc, bias);
  }
#endif
  sgemm_panels(trans_a, trans_b, M, N, K, alpha, a, b, beta, c, ldc, bias);
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc, const float* bias) {
  sgemm(trans_a, trans_b, M, N, K, alpha, SgemmOperand{a, nullptr, DType::f32, lda},
        SgemmOperand{b, nullptr, DType::f32, ldb}, beta, c, ldc, bias);
}

bool sgemm_runs_ours() { return use_own_kernel(); }

const char* sgemm_kernel() {
  if (!use_own_kernel()) return "openblas";
#if defined(RINGSTEP_SGEMM_AVX512)
  return "avx512-12x32";
#elif defined(RINGSTEP_SGEMM_AVX2)
  return "avx2-6x16";
#else
  return "portable-6x16";
#endif
}

void sgemm_force_openblas(bool force) { forced_openblas().store(force); }

void PackedB::pack(bool trans, const float* b, int ldb, int K, int N) {
  rows_ = K;
  cols_ = N;
  packed_ = use_own_kernel();
  trans_ = trans;
  view_ = b;
  ldb_ = ldb;
  in_place_ = packed_ && !trans && N % NR == 0;
  if (!packed_ || in_place_) return;
  const int panels = (N + NR - 1) / NR;
  panels_.resize(size_t(panels) * K * NR);
  for (int q = 0; q < panels; ++q) {
    pack_b_panel(trans, SgemmOperand{b, nullptr, DType::f32, ldb}, 0, K, q * NR,
                 std::min(NR, N - q * NR), panels_.data() + size_t(q) * K * NR);
  }
}

// The products here are small (attention's head blocks, in L1 or L2), so A's whole register
// blocks and an untransposed B with whole panels are read in place, as a packed copy would
// hold them but with their own strides; only A's last partial block is packed. The sums
// are the same chains over k as sgemm's.
void gemm_packed(bool trans_a, int M, int N, int K, float alpha, const float* a, int lda,
                 const PackedB& b, float beta, float* c, int ldc, Triangle tri) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return scale_c(M, N, beta, nullptr, c, ldc);
#ifdef RINGSTEP_HAVE_BLAS
  if (!b.packed_) {
    return sgemm_openblas(trans_a, b.trans_, M, N, K, alpha, a, lda, b.view_, b.ldb_, beta, c, ldc,
                          nullptr);
  }
#endif
  thread_local std::vector<float, Eigen::aligned_allocator<float>> a_buf;
  float* edge = aligned_scratch(a_buf, size_t(MR) * kDepth);
  const int whole = M / MR * MR;
  for (int k0 = 0; k0 < K; k0 += kDepth) {
    const int kc = std::min(kDepth, K - k0);
    const Write w = block_write(k0, alpha, beta, nullptr);
    if (whole < M)
      pack_a(trans_a, SgemmOperand{a, nullptr, DType::f32, lda}, whole, M - whole, k0, kc, edge);
    for (int q = 0; q * NR < N; ++q) {
      const int n = std::min(NR, N - q * NR);
      for (int p = 0; p < M; p += MR) {
        const int m = std::min(MR, M - p);
        const Depth d = tile_depth(tri, p, m, q * NR, k0, kc);
        const size_t k = size_t(k0 + d.lo);
        TileOperands t{edge + size_t(d.lo) * MR, 1, MR, nullptr, 0};
        if (p < whole) {
          t = trans_a ? TileOperands{a + k * lda + p, 1, size_t(lda), nullptr, 0}
                      : TileOperands{a + size_t(p) * lda + k, size_t(lda), 1, nullptr, 0};
        }
        if (b.in_place_) {
          t.b = b.view_ + k * b.ldb_ + q * NR;
          t.b_k = size_t(b.ldb_);
        } else {
          t.b = b.panels_.data() + size_t(q) * b.rows_ * NR + k * NR;
          t.b_k = NR;
        }
        micro_kernel(d.hi - d.lo, t, m, n, w, c + size_t(p) * ldc + q * NR, ldc);
      }
    }
  }
}

}  // namespace ringstep::cpu
