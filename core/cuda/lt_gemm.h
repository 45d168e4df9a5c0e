// Runs a GemmPlan (core/cuda/gemm_plan.h) on cuBLASLt: A and B of one type (fp32 or bf16),
// C and D fp32 and the same buffer, fp32 accumulation (TF32 products only when asked for
// with fp32 operands). Owns the cuBLASLt handle and one workspace allocated at
// construction. Every call is checked (cuda_check.h). Not thread-safe.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cuda/gemm_plan.h"

namespace ringstep::cuda {

class LtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // C = op(A) op(B) + plan.beta C, enqueued on STREAM. AB_TYPE is CUDA_R_32F or
  // CUDA_R_16BF; TF32 applies to CUDA_R_32F only. std::runtime_error naming the plan when
  // cuBLASLt has no algorithm for it.
  void run(const GemmPlan& plan, cudaDataType_t ab_type, bool tf32, const void* A, const void* B,
           float* C, cudaStream_t stream);

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace ringstep::cuda
