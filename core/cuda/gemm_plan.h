// The matrix products of the CUDA backend as plain data: each row-major product an op
// needs, written as one column-major (cuBLAS) GEMM
//   C[b] (m x n, ldc) = op(A[b]) op(B[b]) + beta C[b],  X[b] = X + b * stride_x,
// where op(A) is m x k (stored k x m when trans_a) and op(B) is k x n (stored n x k when
// trans_b). A row-major (R x S) matrix with row stride ld is a column-major (S x R) one with
// the same ld, which is how every plan below is derived. Plain C++: the plans and
// gemm_reference run on the CPU, so the layout math is tested without a GPU
// (tests/core/cuda/gemm_plan_test.cpp); the backend hands the same plans to cuBLASLt.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringstep::cuda {

struct GemmPlan {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements; ignored when batch == 1
  float beta = 0.0f;

  bool operator==(const GemmPlan&) const = default;
};

// What the product does after the multiply (cuBLASLt's epilogues): nothing; add a bias per
// row of C (per output feature of a linear layer: BIAS); add the bias, keep the sum in an
// auxiliary matrix and store its GELU (GELU_AUX_BIAS: the MLP's first product); multiply by
// GELU' of the auxiliary matrix (DGELU: the gradient into that GELU's input).
enum class Epilogue : uint8_t { none, bias, gelu_aux_bias, dgelu };

// Everything cuBLASLt's descriptors and its choice of algorithm depend on, and nothing else:
// the plan's shape (beta is zeroed: it is a per-call scalar), the operand and output types
// (cudaDataType_t values), TF32, the epilogue and the operands' alignments. Products with
// equal keys share one cached plan (core/cuda/lt_gemm.h).
struct GemmKey {
  GemmPlan shape;
  int ab_type = 0, cd_type = 0;
  bool tf32 = false;
  Epilogue epilogue = Epilogue::none;
  uint32_t align_a = 0, align_b = 0, align_c = 0;

  bool operator==(const GemmKey&) const = default;
};

// The key of one call: AB_BYTES and CD_BYTES are the element sizes of the operand and output
// types, which scale the batch strides into the alignments.
GemmKey make_gemm_key(const GemmPlan& p, int ab_type, size_t ab_bytes, int cd_type,
                      size_t cd_bytes, bool tf32, Epilogue epilogue, const void* A, const void* B,
                      const void* C);

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const noexcept;
};

// Linear layer, inp (N, C), weight (OC, C), out (N, OC), all row-major.
// out = inp @ weight^T                      A = weight, B = inp, C = out
GemmPlan plan_linear_forward(int N, int C, int OC);
// dinp = dout @ weight (beta 0)             A = weight, B = dout, C = dinp
GemmPlan plan_linear_dinp(int N, int C, int OC);
// dweight += dout^T @ inp                   A = inp, B = dout, C = dweight
GemmPlan plan_linear_dweight(int N, int C, int OC);

// The plan's product on the host in double, stored to float: the reference semantics of
// what cuBLASLt is asked to compute (C is read when beta != 0).
void gemm_reference(const GemmPlan& p, const float* A, const float* B, float* C);

// gemm_reference with EPILOGUE (beta 0, one batch), as cuBLASLt is asked for it; X being the
// product in double: bias: C = X + BIAS[i] (i the row of C); gelu_aux_bias: AUX = X + BIAS[i]
// stored to float, C = GELU(X + BIAS[i]) (tanh approximation, core/cpu/ops.h); dgelu: C = X
// GELU'(AUX). AUX has C's leading dimension. Unused pointers may be null.
void gemm_reference(const GemmPlan& p, Epilogue epilogue, const float* A, const float* B, float* C,
                    const float* bias, float* aux);

// The alignment cuBLASLt may assume for an operand that starts at P and, when BATCH > 1,
// steps by STRIDE_BYTES: the largest power of two dividing both, capped at 64 bytes, the
// arena's alignment, so that the algorithm chosen (and with it the bits of the result)
// never depends on where in the arena a tensor happens to land.
uint32_t operand_alignment(const void* p, int batch, int64_t stride_bytes);

// Elements of the stored operands, for checking buffer sizes: the span from the first to
// one past the last element that the plan touches.
size_t span_a(const GemmPlan& p);
size_t span_b(const GemmPlan& p);
size_t span_c(const GemmPlan& p);

}  // namespace ringstep::cuda
