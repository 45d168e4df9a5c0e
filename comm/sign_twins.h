// The CPU twins of the sign code's CUDA kernels (comm/nccl/sign_kernels.cu): the same
// SignKernels, run at once on host memory, each kernel's threads as a plain loop in the order
// of its indices, with the same comm/sign_code.h functions, so that the twins give the
// kernels' bits, and both give comm/sign_allreduce.h's. A warp's ballot is its 32 lanes'
// bits gathered into one word. STREAM is ignored. Stateless; thread-safe.
#pragma once

#include "comm/sign_kernels.h"

namespace ringstep {

class HostSignKernels final : public SignKernels {
 public:
  void zero(void* p, size_t bytes, StreamHandle stream) override;
  void add_error(const float* x, float* e, size_t n, StreamHandle stream) override;
  void scales(const float* z, const SignRuns& r, bool mean_abs, double* run_sums, float* scales,
              StreamHandle stream) override;
  void place_scales(const float* scales, const size_t* placements, size_t n, uint8_t* msgs,
                    StreamHandle stream) override;
  void code(float* z, const SignTables& t, int j0, int j1, const float* scales, size_t segment_base,
            uint8_t* msgs, StreamHandle stream) override;
  void server_sum(const uint8_t* in, const uint8_t* own, const SignTables& t, int r, float* e,
                  StreamHandle stream) override;
  void decode(const uint8_t* gathered, const SignTables& t, float* x, StreamHandle stream) override;
};

}  // namespace ringstep
