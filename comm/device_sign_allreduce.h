// comm/sign_allreduce.h's SignAllreduce on device memory: the same schedule, the same
// message format (comm/sign_layout.h) and the same bits, with its stages as kernels
// (comm/sign_kernels.h: CUDA, or their CPU twins) and its two exchanges as grouped
// point-to-point transfers on a DeviceComm's comm stream (comm/device_comm.h: NCCL's
// ncclSend/ncclRecv, or a host fake over MPI):
//   worker stage (encode):  zero the messages; z = x + e_w (in WORKER_ERROR); each segment's
//                           scale; the scales into the messages of the chunks each segment
//                           touches; the bits of chunk j into message j, e_w = z - s_w sign z;
//   all-to-all:             message j to rank j, rank q's message for this rank's chunk
//                           into slot q of the received messages (one group);
//   server stage (serve):   z_s = (sum over ranks q in order of q's +-s_w) / N + e_s (in
//                           SERVER_ERROR, this rank's chunk only); the scale of each segment's
//                           part of the chunk; the code into this rank's slot of the gathered
//                           messages, e_s = z_s - s_s sign z_s;
//   allgather:              this rank's server message to every rank (one group);
//   decode:                 x[i] = +-s_s from the gathered messages.
// Not computed on the device: SignAllreduceStats' worker_sq_err and worker_sq_norm (0).
// One object per vector shape; its buffers and tables live in MEMORY (the device's
// runtime), made at construction. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/device_comm.h"
#include "comm/sign_allreduce.h"  // SignAllreduceStats
#include "comm/sign_kernels.h"
#include "core/config.h"  // OneBitScale
#include "core/runtime.h"

namespace ringstep {

class DeviceSignAllreduce {
 public:
  // For rank RANK of NRANKS; SEGMENT_ENDS as for SignAllreduce. KERNELS must work on
  // MEMORY's pointers; both outlive this object.
  DeviceSignAllreduce(size_t count, const std::vector<size_t>& segment_ends, int nranks, int rank,
                      OneBitScale kind, Runtime& memory, SignKernels& kernels);
  ~DeviceSignAllreduce();
  DeviceSignAllreduce(const DeviceSignAllreduce&) = delete;
  DeviceSignAllreduce& operator=(const DeviceSignAllreduce&) = delete;

  // The whole exchange queued on COMM's comm stream, behind the compute stream's work so
  // far: X[0, count) (device memory) becomes the compressed mean, WORKER_ERROR and
  // SERVER_ERROR (count elements each, device memory, laid out as SignAllreduce's) are
  // updated. Returns at once with bytes_sent; the results are there once the comm stream
  // has run (compute_waits_for_comm). Collective: every rank queues it in the same order.
  // This object and the buffers must live until then. run() is queue_exchange() then
  // queue_decode(): X is read by the first and written by the second only, so a caller
  // may queue the exchange, and decide later whether to decode it.
  SignAllreduceStats run(DeviceComm& comm, float* x, float* worker_error, float* server_error);
  SignAllreduceStats queue_exchange(DeviceComm& comm, const float* x, float* worker_error,
                                    float* server_error);
  void queue_decode(DeviceComm& comm, float* x);

  // The stages, queued on STREAM: what run() queues between its transfers.
  void encode(const float* x, float* worker_error, StreamHandle stream);
  void serve(float* server_error, StreamHandle stream);
  void decode(float* x, StreamHandle stream) const;

  // The message buffers, for a caller that moves the messages itself (a single-process
  // simulation): message j of each, message_bytes() long, in MEMORY. After encode, sent(j)
  // is this rank's message for server j; serve reads rank q's message for this rank's
  // chunk from received(q) (q != rank) and writes this rank's server message to
  // gathered(rank); decode reads every gathered(j).
  size_t message_bytes() const;
  uint8_t* sent(int j);
  uint8_t* received(int q);
  uint8_t* gathered(int j);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringstep
