// GEMM with 16-bit inputs (bf16 or fp16) and fp32 accumulation, the CPU twin of cuBLAS's
// cublasGemmEx(CUDA_R_16BF, ..., CUBLAS_COMPUTE_32F). bf16 runs on Intel AMX tiles where the
// CPU and the kernel allow it, else on AVX512-BF16 dot products where the CPU has them
// (AMD Zen 4); everything else converts blocks to fp32 and calls sgemm.
// Thread-safe; may be called from inside an OpenMP region (it then runs on that one thread).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ringstep::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C. Row-major. A and B hold 16-bit values of
// dtype DT (DType::bf16 or DType::f16, as raw uint16_t bits, see core/dtype.h); products are
// exact in fp32 and accumulate in fp32; C is fp32 with leading dimension ldc.
// op(A) is M x K: A itself (stored M x K, leading dim lda) or, with TRANS_A, A^T (A stored K x M).
// op(B) is K x N: B itself (stored K x N, ldb) or, with TRANS_B, B^T (B stored N x K).
// beta == 0 overwrites C (C's old contents, even NaN, are ignored).
// Deterministic: the result depends only on the inputs (not on the thread count, nor on the
// addresses/alignment of the buffers), so recomputing a forward gives bit-identical output.
// The two bf16 kernels, like their hardware, treat subnormal bf16 inputs and subnormal fp32
// results of each dot-product step as zero. Throws std::invalid_argument for negative sizes,
// leading dimensions shorter than a row, or DT == f32.
void gemm16(DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc);

// One operand of gemm16 as the caller holds it: its 16-bit values BITS (leading dim LD)
// and, optionally, the same values widened to fp32 in WIDE (leading dim LD_WIDE; same
// stored shape). The fp32-sgemm kernel multiplies WIDE when set instead of widening BITS
// again; the bf16 kernels read BITS. BITS may be null only where gemm16_widens(dt) and WIDE
// is set: then WIDE must hold values of DT (e.g. from round_to_dtype in core/dtype.h).
struct Operand16 {
  const uint16_t* bits = nullptr;
  int ld = 0;
  const float* wide = nullptr;
  int ld_wide = 0;
};

// gemm16 on operands that may carry their widening: the same bits as gemm16 on BITS. With
// BIAS, C = alpha * op(A) * op(B) + beta * C + bias, bias[j] added to column j last (as
// sgemm adds it, sgemm.h): with beta == 0 the same bits as C filled with the bias and
// beta == 1.
void gemm16(DType dt, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
            const Operand16& A, const Operand16& B, float beta, float* C, int ldc,
            const float* bias = nullptr);

// op(B) of gemm16 (K x N) prepared once for several products that read it whole, such as a
// weight shared by every row block of a linear: packed in the bf16 kernels' tile layout,
// or, where gemm16 widens, kept as a view of the caller's operand (which must then outlive
// it unchanged). A product with it has the same bits as gemm16 on the operand itself.
class PackedB16 {
 public:
  // B(k, j) = trans_b ? b[j * ld + k] : b[k * ld + j] for k < K, j < N. Throws
  // std::invalid_argument as gemm16 would for B.
  void pack(DType dt, bool trans_b, int K, int N, const Operand16& B);

 private:
  friend void gemm16(DType, bool, int, int, int, float, const Operand16&, const PackedB16&, float,
                     float*, int, const float*);
  DType dt_ = DType::bf16;
  bool trans_b_ = false, tiles_ = false;  // tiles_: packed_ holds the tiles, else view_
  int K_ = 0, N_ = 0;
  Operand16 view_;
  std::vector<char, Eigen::aligned_allocator<char>> packed_;
};

// gemm16 with op(B) = B as packed (K and N must be the packed ones); the same bits as gemm16
// on the operand B was packed from.
void gemm16(DType dt, bool trans_a, int M, int N, int K, float alpha, const Operand16& A,
            const PackedB16& B, float beta, float* C, int ldc, const float* bias = nullptr);

// Whether gemm16 for DT widens its operands to fp32 on this machine (the fp32-sgemm kernel):
// then a caller that multiplies one operand several times gains from widening it once.
bool gemm16_widens(DType dt);

// Which kernel gemm16 uses for DT on this machine: "amx-bf16", "avx512-bf16" or "fp32-sgemm"
// (convert blocks to fp32, then sgemm).
const char* gemm16_kernel(DType dt);

// Forces the fp32-sgemm kernel for every dtype (process-wide), so tests can exercise both
// paths. The environment variable RINGSTEP_GEMM16=sgemm sets it at start.
void gemm16_force_fallback(bool force);

}  // namespace ringstep::cpu
