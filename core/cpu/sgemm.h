// fp32 row-major matrix products: the model's linears, the LM head and attention's head
// products go through here. Two kernels:
// - ours: BLIS's layered blocking (Goto & van de Geijn 2008) around a register-blocked
//   micro-kernel (Van Zee & van de Geijn 2015), with the bias broadcast folded into the
//   write of C: "avx512-12x32" where the CPU has AVX-512, "avx2-6x16" where it has AVX2 and
//   FMA (docs/perf-log.md sections 14c and 14g measure them against OpenBLAS).
// - "openblas": cblas_sgemm, where the build has no AVX2 (RINGSTEP_NATIVE=OFF), or when
//   forced (RINGSTEP_SGEMM=openblas). Without BLAS, ours runs with a portable micro-kernel.
//
// Our kernel computes each element of C as one chain of fused multiply-adds over k in
// order (in blocks of 384, added to C in order) and splits only M across threads, so its
// bits do not depend on the thread count or on where a block's edges fall.
// Thread-safe; inside an OpenMP region it runs on the calling thread.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ringstep::cpu {

// C[M x N] = alpha * op(A) * op(B) + beta * C + bias (bias[j] added to column j when BIAS is
// non-null), row-major with leading dims LDA, LDB, LDC. op(A) is M x K: A (stored M x K) or,
// with TRANS_A, A^T (stored K x M); op(B) is K x N: B (stored K x N) or, with TRANS_B, B^T
// (stored N x K). beta == 0 writes C without reading it (NaNs in C are overwritten).
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc, const float* bias = nullptr);

// An operand as sgemm reads it: fp32 values F32, or, where F32 is null, 16-bit values BITS
// of dtype DT (bf16 or fp16, core/dtype.h), widened (exactly) as our kernel packs them, or
// into a scratch copy first for OpenBLAS. LD is the leading dim of whichever is set.
struct SgemmOperand {
  const float* f32 = nullptr;
  const uint16_t* bits = nullptr;
  DType dt = DType::f32;
  int ld = 0;
};

// sgemm on operands that may hold 16-bit values; the same bits as sgemm on their widening.
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const SgemmOperand& a,
           const SgemmOperand& b, float beta, float* c, int ldc, const float* bias = nullptr);

// The kernel sgemm runs on this machine: "avx512-12x32", "avx2-6x16" or "openblas" (see
// above), or "portable-6x16" in a build without BLAS or AVX2.
const char* sgemm_kernel();

// Whether sgemm runs on our kernel here (any but "openblas").
bool sgemm_runs_ours();

// Forces cblas_sgemm (process-wide) where the build has BLAS, so the two kernels can be
// compared in one process (bench, tests). RINGSTEP_SGEMM=openblas sets it at start.
void sgemm_force_openblas(bool force);

// A causal product's triangle, which gemm_packed may skip: row i of the product reaches
// column (or key) i + diag.
// - c_lower: only C(i, j) with j <= i + diag is wanted; a register block of C wholly
//   past that line may get beta * C instead of the product (zero where beta == 0).
// - a_lower: op(A)(i, k) == 0 for k > i + diag; a row's sum may stop there.
// - a_upper: op(A)(i, k) == 0 for k < i - diag; a row's sum may start there.
// The skipped terms are exact zeros: with finite B they leave a chain of fused multiply-adds
// (which starts at +0) unchanged, so the wanted entries keep the full product's bits.
struct Triangle {
  enum Kind { none, c_lower, a_lower, a_upper } kind = none;
  int diag = 0;
};

// op(B), K x N, prepared once for many products that read its leading rows and columns
// (attention: a head's k and v, multiplied by every query block): packed into our kernel's
// panels, or kept as a view of the caller's B (which must then outlive it unchanged) where
// our kernel can read B's panels in place (B untransposed, N a whole number of panels) or
// where sgemm runs on OpenBLAS when it is packed.
class PackedB {
 public:
  // B(k, j) = trans ? b[j * ldb + k] : b[k * ldb + j], for k < K, j < N.
  void pack(bool trans, const float* b, int ldb, int K, int N);
  int rows() const { return rows_; }
  int cols() const { return cols_; }

 private:
  friend void gemm_packed(bool, int, int, int, float, const float*, int, const PackedB&, float,
                          float*, int, Triangle);
  std::vector<float, Eigen::aligned_allocator<float>> panels_;  // K x NR each, in order
  bool packed_ = false;                                         // else the view below
  bool in_place_ = false;  // our kernel reads whole panels from the view (untransposed B)
  bool trans_ = false;
  const float* view_ = nullptr;
  int ldb_ = 0;
  int rows_ = 0, cols_ = 0;
};

// C[M x N] = alpha * op(A) * B[0:K, 0:N] + beta * C, op(A) as in sgemm, on the calling
// thread, skipping what TRI allows. Requires K <= b.rows() and N <= b.cols().
void gemm_packed(bool trans_a, int M, int N, int K, float alpha, const float* a, int lda,
                 const PackedB& b, float beta, float* c, int ldc, Triangle tri = {});

}  // namespace ringstep::cpu
