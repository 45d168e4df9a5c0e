// Runs a GemmPlan (core/cuda/gemm_plan.h) on cuBLASLt: A and B of one type (fp32 or bf16), C
// and D one buffer of the output type (fp32, or bf16 with beta 0), fp32 accumulation (TF32
// products only when asked for with fp32 operands), optionally a per-row bias epilogue.
// The descriptors and the algorithm of each distinct GemmKey are built once, by the first
// call with that key, and reused: a training step's products query the heuristic only in
// its first step. Owns the cuBLASLt handle and one workspace allocated at construction.
// Every call is checked (cuda_check.h). Not thread-safe.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <unordered_map>

#include "core/cuda/gemm_plan.h"

namespace ringstep::cuda {

struct GemmTypes {
  cudaDataType_t ab = CUDA_R_32F;  // A and B: CUDA_R_32F or CUDA_R_16BF
  cudaDataType_t cd = CUDA_R_32F;  // C and D: CUDA_R_32F, or CUDA_R_16BF with beta 0
  bool tf32 = false;               // TF32 products; applies to fp32 operands only
};

class LtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // C = op(A) op(B) + plan.beta C, enqueued on STREAM. std::runtime_error naming the plan
  // when cuBLASLt has no algorithm for it.
  void run(const GemmPlan& plan, const GemmTypes& types, const void* A, const void* B, void* C,
           cudaStream_t stream);

  // C = op(A) op(B) + BIAS (fp32, one value per row of C), plan.beta 0, enqueued on STREAM.
  // Returns false, having enqueued nothing, when cuBLASLt has no algorithm for this bias
  // epilogue; the caller then adds the bias itself.
  bool run_bias(const GemmPlan& plan, const GemmTypes& types, const void* A, const void* B,
                void* C, const float* bias, cudaStream_t stream);

  // C = GELU(op(A) op(B) + BIAS) and AUX = op(A) op(B) + BIAS (the GELU's input, C's type,
  // C's leading dimension, which must be a multiple of 8), plan.beta 0: the GELU_AUX_BIAS
  // epilogue. AUX must be 64-byte aligned (an arena tensor). Returns false, having enqueued
  // nothing, where cuBLASLt has no algorithm for it (the key's plan is then kept as one
  // without an algorithm, so the question is asked once).
  bool run_gelu_aux_bias(const GemmPlan& plan, const GemmTypes& types, const void* A,
                         const void* B, void* C, void* aux, const float* bias,
                         cudaStream_t stream);
  // C = (op(A) op(B)) o GELU'(AUX), AUX of C's type with C's leading dimension (a multiple of
  // 8), 64-byte aligned, plan.beta 0: the DGELU epilogue. False as run_gelu_aux_bias.
  bool run_dgelu(const GemmPlan& plan, const GemmTypes& types, const void* A, const void* B,
                 void* C, const void* aux, cudaStream_t stream);

  // Distinct keys seen so far: each cost one heuristic query.
  size_t plans_built() const { return plans_.size(); }
  // Of those, the keys cuBLASLt has no algorithm for.
  size_t plans_without_algorithm() const;

 private:
  struct Plan;  // descriptors and algorithm of one key (lt_gemm.cu)
  Plan& plan_for(const GemmKey& key, const void* aux = nullptr);
  void enqueue(Plan& plan, float beta, const void* A, const void* B, void* C,
               cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<GemmKey, std::unique_ptr<Plan>, GemmKeyHash> plans_;
};

}  // namespace ringstep::cuda
