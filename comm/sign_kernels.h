// The stages of a sign-compressed AllReduce (comm/sign_allreduce.h) as kernels over one
// rank's buffers, the seam between the device exchange (comm/device_sign_allreduce.h) and
// where its arithmetic runs: CUDA kernels (comm/nccl/sign_kernels.h) or their CPU twins
// (comm/sign_twins.h), both built on comm/sign_code.h's per-element math, so that both give
// SignAllreduce's bits. Every call is queued on STREAM (a cudaStream_t for CUDA; ignored by
// the twins, which run at once) and reads and writes only the memory of its runtime; none
// waits. Nothing here names CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringstep {

using StreamHandle = void*;  // a device stream, opaque here; nullptr: the default one

// A layout (comm/sign_layout.h) as kernels read it: its sizes, and its tables in the
// kernels' memory. Message j of a buffer of messages starts at byte j * block_bytes.
struct SignTables {
  size_t count = 0, chunk = 0, scale_bytes = 0, block_bytes = 0;
  int nranks = 1;
  const size_t* ends = nullptr;  // the segments' ends
  size_t segments = 0;
  const size_t* first_segment = nullptr;  // per chunk: the first segment it touches
};

// Parts of a vector whose scales are taken, each cut into runs of at most kScaleRun
// elements from its first: RUNS holds (begin, end) element pairs, part p's runs are
// [part_runs[p], part_runs[p + 1]) (none: an empty part, scale 0).
struct SignRuns {
  const size_t* runs = nullptr;
  size_t nruns = 0;
  const size_t* part_runs = nullptr;  // parts + 1 entries
  size_t parts = 0;
};

class SignKernels {
 public:
  virtual ~SignKernels() = default;

  // P[0, bytes) = 0.
  virtual void zero(void* p, size_t bytes, StreamHandle stream) = 0;
  // E[i] = X[i] + E[i], i < N (z formed in the error buffer).
  virtual void add_error(const float* x, float* e, size_t n, StreamHandle stream) = 0;
  // SCALES[p] = the fp32 scale of part p of Z (sign_code's order: each run's 16 lane sums
  // combined, the runs added in order); RUN_SUMS: scratch of R.nruns doubles.
  virtual void scales(const float* z, const SignRuns& r, bool mean_abs, double* run_sums,
                      float* scales, StreamHandle stream) = 0;
  // For i < N: SCALES[placements[2i]] stored at MSGS + placements[2i + 1] (bytes).
  virtual void place_scales(const float* scales, const size_t* placements, size_t n, uint8_t* msgs,
                            StreamHandle stream) = 0;
  // Chunks [J0, J1): the packed bits of Z into message j of MSGS (after its scale slots;
  // whole bytes, padding's bits 0) and, for every real element i, Z[i] = z - s sign z with
  // s = SCALES[segment_of(i) - SEGMENT_BASE]. The warp-ballot packing of sign_code.h.
  virtual void code(float* z, const SignTables& t, int j0, int j1, const float* scales,
                    size_t segment_base, uint8_t* msgs, StreamHandle stream) = 0;
  // The server's sum for chunk R: for each of its real elements i, E[i] = server_z(sum over
  // ranks q = 0..N-1 in order of q's +-scale, N, E[i]); rank q's message is at
  // IN + q * block_bytes, except rank R's own, at OWN.
  virtual void server_sum(const uint8_t* in, const uint8_t* own, const SignTables& t, int r,
                          float* e, StreamHandle stream) = 0;
  // X[i] = +-s for every i < count, from the server messages GATHERED (message j: chunk j).
  virtual void decode(const uint8_t* gathered, const SignTables& t, float* x,
                      StreamHandle stream) = 0;
};

}  // namespace ringstep
