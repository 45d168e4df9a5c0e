#include "core/cuda/lt_gemm.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"

namespace ringstep::cuda {
namespace {

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// The descriptors of one call, destroyed on every path out (checks throw).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// A column-major ROWS x COLS operand with leading dimension LD, batched by plan.
void make_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows, int64_t cols,
                 int64_t ld, int batch, int64_t stride) {
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch <= 1) return;
  const int32_t count = batch;
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof(count)));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

void set_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   uint32_t bytes) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof(bytes)));
}

std::string describe(const GemmPlan& p) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         " ta=" + std::to_string(p.trans_a) + " tb=" + std::to_string(p.trans_b) +
         " lda=" + std::to_string(p.lda) + " ldb=" + std::to_string(p.ldb) +
         " ldc=" + std::to_string(p.ldc) + " batch=" + std::to_string(p.batch);
}

}  // namespace

LtGemm::LtGemm() {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = device_alloc(kWorkspaceBytes);
}

LtGemm::~LtGemm() {
  device_free(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void LtGemm::run(const GemmPlan& p, cudaDataType_t ab_type, bool tf32, const void* A,
                 const void* B, float* C, cudaStream_t stream) {
  const cublasComputeType_t compute =
      tf32 && ab_type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LtDescs d;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F));
  const int32_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Stored shapes: op(A) is m x k, so A is k x m when transposed; likewise B.
  make_layout(&d.a, ab_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.batch,
              p.stride_a);
  make_layout(&d.b, ab_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.batch,
              p.stride_b);
  make_layout(&d.c, CUDA_R_32F, p.m, p.n, p.ldc, p.batch, p.stride_c);

  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; arena tensors are
  // 64-byte aligned, weight-copy and per-head operands may be less.
  const size_t ab = type_bytes(ab_type);
  set_alignment(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                operand_alignment(A, p.batch, p.stride_a * int64_t(ab)));
  set_alignment(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                operand_alignment(B, p.batch, p.stride_b * int64_t(ab)));
  const uint32_t c_align = operand_alignment(C, p.batch, p.stride_c * 4);
  set_alignment(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c_align);
  set_alignment(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c_align);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref, 1,
                                              &result, &found));
  if (found == 0) throw std::runtime_error("cuBLASLt has no algorithm for GEMM " + describe(p));
  const float alpha = 1.0f, beta = p.beta;
  CUBLAS_CHECK(cublasLtMatmul(handle_, d.op, &alpha, A, d.a, B, d.b, &beta, C, d.c, C, d.c,
                              &result.algo, workspace_, kWorkspaceBytes, stream));
}

}  // namespace ringstep::cuda
