// Sign-compressed AllReduce with error feedback (Tang et al. 2021, "1-bit Adam", arXiv
// 2102.02888; DeepSpeed's compressed_allreduce is the reference for the schedule): the mean
// over ranks of a float vector, sent as one bit per element plus one scale per message, in
// two phases like a reduce-scatter and an allgather. It knows vectors, not optimizers:
// 1-bit Adam's momentum exchange is one caller (optim/onebit_adam.h).
//
// Segments. The caller cuts the vector into segments (1-bit Adam: the model's tensors, or
// blocks of them, split_segments) and every segment gets its own scales, since one scale for
// values of very different sizes codes the small ones as large: each worker scale is over
// one segment, each server scale over one segment's part of the server's chunk. A message
// carries the scales of the segments its chunk touches, not all of them, so that scales
// cost 32 bits per segment per phase however many ranks there are.
//
// Layout. COUNT elements are padded, internally, to P = round_up(count, 8 N) for N ranks;
// server chunk j is [j P/N, (j+1) P/N) of the padded vector, a whole number of bytes when
// packed. Padding is +0 in every input, never enters a scale or an error buffer, and never
// reaches the output.
//
// Worker (every rank r):  z = x + e_w;  s_w = scale(z) per segment;  e_w = z - s_w sign(z);
//                         chunk j of sign(z), with every s_w, goes to rank j (an all-to-all).
// Server (rank j, for its chunk; ranks q summed in order 0..N-1, in fp32, then / N):
//                         a = (sum_q s_w(q) sign_q) / N;  z_s = a + e_s;  s_s = scale(z_s)
//                         per segment part; e_s = z_s - s_s sign(z_s); sign(z_s) and the
//                         s_s go to every rank (an allgather).
// Output (every rank):    x[i] = s_s sign(z_s[i]) with chunk j's scale of i's segment, the
//                         same bits on every rank. So over calls, sum of outputs = sum of
//                         mean inputs - (mean_r e_w(r) + e_s), as accumulated since the
//                         buffers were 0.
//
// Scales are over the real (unpadded) elements of what is compressed, summed in double in
// a fixed order and rounded to fp32: runs of kScaleRun elements from the first, each run's
// element i in lane i mod 16, the lanes combined in order, then the run's tail, and the
// runs' sums added in order; mean_abs = mean |z|, the s minimising ||z - s sign z||_2;
// l2 = ||z||_2 / sqrt(n), DeepSpeed's. A chunk with no real element has scale 0. The runs
// fix the order whatever the threads: the worker stage and the decoding split their work
// over the calling thread's OpenMP team (whole runs, segments, messages and blocks of
// elements to each thread) and give the same bits on any number of threads; the server
// stage runs on the thread that calls exchange, alone.
// Transport: our own point-to-point messages (two exchanges with every peer; no MPI
// collective), each [fp32 scales of the segments chunk j touches, in segment order | packed
// chunk j] moved as raw 16-bit words; every message is as long as the one with the most
// scales (the spare slots are 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/sign_layout.h"  // kScaleRun, sign_chunk_elems, the message format
#include "core/config.h"       // OneBitScale

namespace ringstep {

// Packed sign code: element i is bit (i mod 8), least significant first, of byte i / 8; a
// set bit means x[i] < 0, so 0, -0 and NaN count as +. pack_signs writes ceil(n / 8) bytes,
// the unused high bits of the last byte 0; unpack_signs writes out[i] = -scale or +scale.
void pack_signs(const float* x, size_t n, uint8_t* out);
void unpack_signs(const uint8_t* in, size_t n, float scale, float* out);

// The fp32 scale of Z[0, n) (see above); 0 when n is 0.
float sign_scale(const float* z, size_t n, OneBitScale kind);

struct SignAllreduceStats {
  size_t bytes_sent = 0;      // this rank's point-to-point payload, both phases
  double worker_sq_err = 0;   // ||z - s_w sign z||^2 of this rank's worker stage
  double worker_sq_norm = 0;  // ||z||^2
};

// X[0, count) = the compressed mean above, identical on every rank. SEGMENT_ENDS are the
// segments' ends, ascending, the last one count ({} = one segment). WORKER_ERROR holds
// count elements (this rank's e_w); SERVER_ERROR holds count elements laid out like X, of
// which only this rank's server chunk is read and written (the rest is left as it is). Both
// start at 0 and are updated in place. Collective: every rank calls it with the same count,
// kind and tag (0 <= tag < 32768, not shared with other traffic in flight). With one rank
// the mean is the input itself and nothing is compressed.
constexpr int kSignAllreduceTag = 0x5342;
SignAllreduceStats sign_allreduce(Communicator& comm, float* x, size_t count,
                                  const std::vector<size_t>& segment_ends, float* worker_error,
                                  float* server_error, OneBitScale kind,
                                  int tag = kSignAllreduceTag);

// One sign_allreduce cut into its stages, so that a caller can overlap them with other work:
// encode (the worker stage) and decode (the output) on the caller's thread, exchange (both
// phases, with the server stage between them) on a comm thread. encode, exchange, decode in
// that order give sign_allreduce's bits; the messages live in this object between the
// stages, so one object serves one vector at a time, and calls of the same shape reuse it.
// Adds elements [begin, end) of a vector into z[0, end - begin) (SignAllreduce::encode). It
// may be called from several threads at once, for different pieces.
using SignInput = std::function<void(size_t begin, size_t end, float* z)>;
// Elements per piece of a SignInput call: 16 KiB of floats, well inside L1 and L2.
constexpr size_t kSignInputPiece = 4096;

class SignAllreduce {
 public:
  // For rank RANK of NRANKS.
  SignAllreduce(size_t count, const std::vector<size_t>& segment_ends, int nranks, int rank,
                OneBitScale kind);
  ~SignAllreduce();
  SignAllreduce(SignAllreduce&&) noexcept;
  SignAllreduce& operator=(SignAllreduce&&) noexcept;

  // Worker stage: z = X + WORKER_ERROR, the messages of sign(z) and the worker scales,
  // WORKER_ERROR = z - s_w sign(z). Returns the statistics (bytes_sent included).
  SignAllreduceStats encode(const float* x, float* worker_error);
  // The same with X formed as it is coded: INPUT(begin, end, z) adds X[begin, end) into
  // z[0, end - begin) (WORKER_ERROR's elements there), once for each piece of
  // kSignInputPiece elements from a segment's start (the last one shorter), each just before
  // the piece is summed for its scale: the input is formed, summed and coded while it is in
  // cache, and X never has to exist (1-bit Adam's local momentum). A thread asks for its
  // pieces in increasing order; the team's threads ask at once. Same bits as encode(X, ...)
  // when INPUT adds X's values.
  SignAllreduceStats encode(const SignInput& input, float* worker_error);
  // The all-to-all, the server stage on this rank's chunk of SERVER_ERROR, the allgather.
  // Collective, after encode, with the same tag on every rank (0 <= tag < 32768).
  void exchange(Communicator& comm, float* server_error, int tag);
  // exchange()'s server stage alone, every rank's message taken to be this rank's own: its
  // work without the communication, to measure what it costs (1-bit Adam's compress: auto).
  void serve_alone(float* server_error);
  // X[0, count) = the mean, the same bits on every rank (after exchange).
  void decode(float* x) const;

 private:
  template <class Add>
  SignAllreduceStats encode_input(Add&& add, float* worker_error);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The bytes sign_allreduce sends per rank for COUNT elements cut at SEGMENT_ENDS over N
// ranks: 2 (N - 1) messages of 4 S + chunk / 8 bytes, rounded up to 16-bit words, where S is
// the most segments any one chunk touches.
size_t sign_allreduce_bytes(size_t count, const std::vector<size_t>& segment_ends, int nranks);

// SEGMENT_ENDS (as for sign_allreduce; {} = one segment of COUNT) with every segment cut into
// blocks of BLOCK elements from its start, the last block of each segment shorter if need
// be; BLOCK 0 cuts nothing.
std::vector<size_t> split_segments(const std::vector<size_t>& segment_ends, size_t count,
                                   size_t block);

}  // namespace ringstep
