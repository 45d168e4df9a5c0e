// 1-bit Adam's sign code on the GPU: comm/sign_kernels.h's stages as CUDA kernels over one
// rank's device buffers, each thread's arithmetic from comm/sign_code.h, so that they give
// their CPU twins' bits (comm/sign_twins.h) and comm/sign_allreduce.h's. Queued on the
// stream given (a cudaStream_t); every launch checked.
//   add_error:    one thread per element;
//   scales:       one block per run (16 lanes, lane l its elements l, l + 16, ...; thread 0
//                 combines them in order), then one thread per part adding its runs in order;
//   code:         one warp per 32 elements of a chunk: __ballot_sync of their bits is the
//                 little-endian word of 4 packed bytes (lanes 0..3 write them), and every
//                 lane writes its element's new error;
//   server_sum, decode, place_scales: one thread per element (or placement).
#pragma once

#include "comm/sign_kernels.h"

namespace ringstep::nccl {

class CudaSignKernels final : public SignKernels {
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

}  // namespace ringstep::nccl
