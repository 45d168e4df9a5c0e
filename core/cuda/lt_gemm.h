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

  // Distinct keys seen so far: each cost one heuristic query.
  size_t plans_built() const { return plans_.size(); }

 private:
  struct Plan;  // descriptors and algorithm of one key (lt_gemm.cu)
  Plan& plan_for(const GemmKey& key);
  void enqueue(Plan& plan, float beta, const void* A, const void* B, void* C,
               cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<GemmKey, std::unique_ptr<Plan>, GemmKeyHash> plans_;
};

}  // namespace ringstep::cuda
