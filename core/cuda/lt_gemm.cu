#include "core/cuda/lt_gemm.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"

namespace ringstep::cuda {
namespace {

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

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

template <typename T>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
}

std::string describe(const GemmKey& key) {
  const GemmPlan& p = key.shape;
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         " ta=" + std::to_string(p.trans_a) + " tb=" + std::to_string(p.trans_b) +
         " lda=" + std::to_string(p.lda) + " ldb=" + std::to_string(p.ldb) +
         " ldc=" + std::to_string(p.ldc) + " batch=" + std::to_string(p.batch) +
         (key.epilogue == Epilogue::bias            ? " epilogue=bias"
          : key.epilogue == Epilogue::gelu_aux_bias ? " epilogue=gelu_aux_bias"
          : key.epilogue == Epilogue::dgelu         ? " epilogue=dgelu"
                                                    : "");
}

GemmKey key_of(const GemmPlan& p, const GemmTypes& t, Epilogue e, const void* A, const void* B,
               const void* C) {
  return make_gemm_key(p, int(t.ab), type_bytes(t.ab), int(t.cd), type_bytes(t.cd), t.tf32, e, A,
                       B, C);
}

}  // namespace

// The descriptors of one key, destroyed with the cache (checks throw mid-build; the
// destructor frees whatever was created).
struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no algorithm for this key

  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtGemm::LtGemm() {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = device_alloc(kWorkspaceBytes);
}

LtGemm::~LtGemm() {
  plans_.clear();
  device_free(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

LtGemm::Plan& LtGemm::plan_for(const GemmKey& key, const void* aux) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  const GemmPlan& p = key.shape;
  const auto ab = cudaDataType_t(key.ab_type), cd = cudaDataType_t(key.cd_type);
  const cublasComputeType_t compute =
      key.tf32 && ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_desc(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  if (key.epilogue == Epilogue::bias || key.epilogue == Epilogue::gelu_aux_bias) {
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
             key.epilogue == Epilogue::bias ? CUBLASLT_EPILOGUE_BIAS
                                            : CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_32F));
  }
  if (key.epilogue == Epilogue::dgelu)
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU);
  if (key.epilogue == Epilogue::gelu_aux_bias || key.epilogue == Epilogue::dgelu) {
    // The auxiliary matrix has C's type and leading dimension; the heuristic reads its
    // pointer's alignment, so it is set before the heuristic runs (every later pointer is an
    // arena tensor, as aligned).
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t(cd));
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(p.ldc));
    set_desc(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  }
  // Stored shapes: op(A) is m x k, so A is k x m when transposed; likewise B.
  make_layout(&plan->a, ab, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.batch,
              p.stride_a);
  make_layout(&plan->b, ab, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.batch,
              p.stride_b);
  make_layout(&plan->c, cd, p.m, p.n, p.ldc, p.batch, p.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise; arena tensors are
  // 64-byte aligned, weight-copy and per-head operands may be less.
  const uint64_t ws = kWorkspaceBytes;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (status == CUBLAS_STATUS_SUCCESS) {
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c,
                                            plan->c, pref, 1, &result, &found);
    plan->found = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (plan->found) plan->algo = result.algo;
    // An epilogue cuBLASLt does not support is reported as NOT_SUPPORTED: a plan without an
    // algorithm, not an error.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) status = CUBLAS_STATUS_SUCCESS;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(status);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void LtGemm::enqueue(Plan& plan, float beta, const void* A, const void* B, void* C,
                     cudaStream_t stream) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, A, plan.a, B, plan.b, &beta, C, plan.c, C,
                              plan.c, &plan.algo, workspace_, kWorkspaceBytes, stream));
}

void LtGemm::run(const GemmPlan& p, const GemmTypes& types, const void* A, const void* B, void* C,
                 cudaStream_t stream) {
  const GemmKey key = key_of(p, types, Epilogue::none, A, B, C);
  Plan& plan = plan_for(key);
  if (!plan.found) throw std::runtime_error("cuBLASLt has no algorithm for GEMM " + describe(key));
  enqueue(plan, p.beta, A, B, C, stream);
}

bool LtGemm::run_bias(const GemmPlan& p, const GemmTypes& types, const void* A, const void* B,
                      void* C, const float* bias, cudaStream_t stream) {
  if (p.beta != 0.0f)
    throw std::logic_error("LtGemm::run_bias: the bias epilogue writes C (beta 0)");
  const GemmKey key = key_of(p, types, Epilogue::bias, A, B, C);
  Plan& plan = plan_for(key);
  if (!plan.found) return false;
  // The bias pointer is per call; the descriptor is read when the product is enqueued.
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  enqueue(plan, 0.0f, A, B, C, stream);
  return true;
}

size_t LtGemm::plans_without_algorithm() const {
  size_t n = 0;
  for (const auto& [key, plan] : plans_) n += plan->found ? 0 : 1;
  return n;
}

bool LtGemm::run_gelu_aux_bias(const GemmPlan& p, const GemmTypes& types, const void* A,
                               const void* B, void* C, void* aux, const float* bias,
                               cudaStream_t stream) {
  if (p.beta != 0.0f || p.ldc % 8 != 0)
    throw std::logic_error("LtGemm::run_gelu_aux_bias: beta 0 and a leading dimension of 8k");
  const GemmKey key = key_of(p, types, Epilogue::gelu_aux_bias, A, B, C);
  Plan& plan = plan_for(key, aux);
  if (!plan.found) return false;
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(aux));
  enqueue(plan, 0.0f, A, B, C, stream);
  return true;
}

bool LtGemm::run_dgelu(const GemmPlan& p, const GemmTypes& types, const void* A, const void* B,
                       void* C, const void* aux, cudaStream_t stream) {
  if (p.beta != 0.0f || p.ldc % 8 != 0)
    throw std::logic_error("LtGemm::run_dgelu: beta 0 and a leading dimension of 8k");
  const GemmKey key = key_of(p, types, Epilogue::dgelu, A, B, C);
  Plan& plan = plan_for(key, aux);
  if (!plan.found) return false;
  set_desc(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  enqueue(plan, 0.0f, A, B, C, stream);
  return true;
}

}  // namespace ringstep::cuda
