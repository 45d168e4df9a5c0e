// One NCCL communicator per job, over device buffers (issue 36's first piece):
// - Rank 0 makes the unique id and broadcasts it over the job's host Communicator (MPI);
//   each rank's GPU is local_rank % device count (core/cuda/device.h), made current first.
// - Every NCCL call is checked (NCCL_CHECK: call, error string, NCCL's last error, rank).
// - synchronize() waits for a stream while polling ncclCommGetAsyncError: an asynchronous
//   error, or no completion within the timeout, aborts the communicator and throws
//   CommError naming this rank and its ring neighbours, instead of hanging.
// - allreduce_native is ncclAllReduce; allreduce_ring is our ring (comm/ring_allreduce.h's
//   RingSchedule) on grouped ncclSend/ncclRecv, with the reduction in our own kernel (fp32
//   accumulation, 16-bit rounded back once per hop, exactly as comm/reduce.h does on the
//   host, so the device ring and the host ring give the same bits). Both are enqueued on
//   STREAM and return without waiting; every rank must call them in the same order.
// Plain C++ header: the CUDA and NCCL types stay in nccl_comm.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_comm.h"  // PeerSend, PeerRecv
#include "comm/ring_allreduce.h"
#include "core/cuda/device.h"

struct CUstream_st;

namespace ringstep::nccl {

using Stream = CUstream_st*;  // cudaStream_t; nullptr is the legacy default stream

// "" when this build has NCCL (RINGSTEP_HAVE_NCCL) and a GPU is usable, else why not.
inline std::string unavailable_reason() {
#ifdef RINGSTEP_HAVE_NCCL
  return cuda_available() ? "" : "no usable CUDA device";
#else
  return "this build has no NCCL (CMake found no nccl.h and libnccl; see docs/gpu.md)";
#endif
}

// Defined only in builds with NCCL (comm/nccl/nccl_comm.cpp).

class NcclComm {
 public:
  // Collective over HOST's ranks. CommError when NCCL cannot form the communicator (two
  // ranks on one GPU, for one).
  explicit NcclComm(Communicator& host);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;

  // buf[0, count) (device memory) = sum over ranks, divided by size() when AVERAGE.
  void allreduce_native(void* buf, size_t count, DType dt, bool average, Stream stream);
  // The same through our ring: opt.op sum only; opt.average divides in the last reducing
  // hop; opt.chunk_bytes (0: 1 MiB) sets the pipeline's sub-chunk. Scratch of one segment
  // is allocated on first use and kept.
  void allreduce_ring(void* buf, size_t count, DType dt, const RingOptions& opt, Stream stream);
  // Allocates now the scratch allreduce_ring needs for COUNT elements of DT (with OPT's
  // sub-chunks), so that calls up to that size allocate nothing (cudaMalloc and cudaFree
  // synchronise the device).
  void reserve_ring(size_t count, DType dt, const RingOptions& opt);

  // SENDS and RECVS (device memory, bytes) as one NCCL group on STREAM (ncclGroupStart,
  // ncclSend/ncclRecv, ncclGroupEnd): DeviceComm::send_recv's contract.
  void send_recv(const std::vector<PeerSend>& sends, const std::vector<PeerRecv>& recvs,
                 Stream stream);

  // Waits for STREAM, polling NCCL's asynchronous error every millisecond; after
  // TIMEOUT_S seconds without completion, or on an error, aborts (see above).
  void synchronize(Stream stream, double timeout_s);
  // Polls NCCL's asynchronous error once, without waiting: on an error, aborts (see above).
  void check_async_error();
  // NCCL's asynchronous error, "" when there is none; aborts nothing. Callable from another
  // thread (a watchdog) while this one is in use.
  std::string async_error();
  // Aborts the communicator and throws the CommError above, WHY in its text.
  [[noreturn]] void abort_with(const std::string& why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringstep::nccl
