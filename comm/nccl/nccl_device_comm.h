// comm.backend: nccl's DeviceComm (comm/device_comm.h): one NcclComm per job, a comm stream
// of its own (non-blocking, so the legacy default stream, the CUDA backend's compute
// stream, never waits for it implicitly) and CUDA events that order the two:
//   reduce_mean:  event on the compute stream (the bucket's gradients are ready), the comm
//                 stream waits on it, then start mark, the ring or ncclAllReduce with
//                 averaging, end mark, all on the comm stream;
//   on_comm_stream, send_recv: the comm stream waits on an event of the compute stream,
//                 then the kernels or the NCCL group, on the comm stream;
//   compute_waits_for_comm: event on the comm stream after its last work; on the
//                 compute stream a mark, the wait on that event, a mark.
// Marks are timing events from a pool reused step after step; read_times() waits for them
// while polling NCCL's asynchronous error. A watchdog thread polls it too while a step's
// reductions are pending, and aborts the job (Communicator::abort_job, naming this rank and
// its ring neighbours) on an error or after the timeout. Plain C++ header: CUDA types stay
// in the .cpp.
#pragma once

#include <memory>
#include <vector>

#include "comm/device_comm.h"

namespace ringstep::nccl {

class NcclDeviceComm final : public DeviceComm {
 public:
  // Collective over HOST's ranks (NcclComm's constructor). A reduction not done after
  // TIMEOUT_S seconds of read_times() waiting aborts the communicator (CommError).
  NcclDeviceComm(Communicator& host, double timeout_s);
  ~NcclDeviceComm() override;

  int rank() const override;
  int size() const override;
  Runtime& memory() override;                                // runtime(Device::cuda)
  SignKernels& sign_kernels() override;                      // CudaSignKernels
  void reserve(const std::vector<size_t>& counts) override;  // the ring's scratch
  void reduce_mean(float* buf, size_t count, AllreduceAlgo algo, uint64_t tag) override;
  void on_comm_stream(std::function<void(StreamHandle)> f) override;
  void send_recv(std::vector<PeerSend> sends, std::vector<PeerRecv> recvs) override;
  void compute_waits_for_comm() override;
  void poll_errors() override;
  DeviceCommTimes read_times() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringstep::nccl
