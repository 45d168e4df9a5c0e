// Gradient buckets reduced on a device, ordered against its compute stream by events: the
// seam between GradSync's device path (train/grad_sync.h) and a stream-ordered communicator
// (comm.backend: nccl, comm/nccl/nccl_device_comm.h). Nothing here names CUDA: a host fake
// (tests/train/fake_device_comm.h) runs the same GradSync path on the CPU under mpirun.
//
// The device has two streams. The compute stream runs the training thread's work in the
// order it is queued (backward's kernels, then the optimizer's); the comm stream runs the
// reductions. reduce_mean() puts a bucket on the comm stream behind everything queued on
// the compute stream so far (the event after the bucket's last gradient kernel);
// compute_waits_for_comm() makes the compute stream wait for the comm stream's last event
// (before the optimizer). Neither blocks the calling thread: within a step the host waits
// for nothing but poll_errors(). read_times() reads the step's marks once its work is done.
// on_comm_stream() and send_recv() queue other work on the comm stream (1-bit Adam's
// compressed exchange, comm/device_sign_allreduce.h): kernels, and grouped point-to-point
// transfers, in the order queued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/engine.h"
#include "comm/sign_kernels.h"  // StreamHandle
#include "core/config.h"
#include "core/intervals.h"

namespace ringstep {

class Communicator;
class Runtime;

// One step's marks on the steady clock (nanoseconds since its epoch): the step's origin is
// the host time of its first reduce_mean(), and device marks are placed at that origin plus
// their device time after the mark taken then, so differences between marks are the
// device's own.
struct DeviceCommTimes {
  // One span per reduction, in the order queued: queued_ns when the compute stream reached
  // the bucket's event (its gradients were ready), start_ns and end_ns on the comm stream.
  std::vector<CommSpan> spans;
  // The compute stream's waits for the comm stream, from the mark recorded before the wait
  // to the mark after it.
  std::vector<Interval> waits;
};

// One transfer of a grouped send_recv: BYTES bytes of device memory to or from rank PEER.
struct PeerSend {
  const void* buf = nullptr;
  size_t bytes = 0;
  int peer = 0;
};
struct PeerRecv {
  void* buf = nullptr;
  size_t bytes = 0;
  int peer = 0;
};

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Where the buffers this communicator moves live (runtime(Device::cuda) for NCCL), and the
  // sign code's kernels that work on them (comm/sign_kernels.h): what a DeviceSignAllreduce
  // on this communicator is made with.
  virtual Runtime& memory() = 0;
  virtual SignKernels& sign_kernels() = 0;

  // Makes now, outside any step, whatever reduce_mean needs for buckets of COUNTS floats
  // (scratch), so that a step allocates nothing.
  virtual void reserve(const std::vector<size_t>& counts) = 0;
  // On the comm stream, behind all work queued on the compute stream so far: BUF[0, COUNT)
  // (fp32, the device's memory) becomes its mean over the ranks, by ALGO (ring: ringstep's
  // ring; native: the library's AllReduce with averaging). TAG names it in the spans. Returns
  // without waiting. Every rank queues the same reductions in the same order.
  virtual void reduce_mean(float* buf, size_t count, AllreduceAlgo algo, uint64_t tag) = 0;
  // On the comm stream, behind all work queued on the compute stream so far: F(stream) queues
  // its work (kernels, comm/sign_kernels.h) on STREAM, the comm stream's handle. F may run
  // later, on another thread (a host fake's stream), so what it captures must live until the
  // comm stream has run it (compute_waits_for_comm, then the compute stream's work).
  virtual void on_comm_stream(std::function<void(StreamHandle)> f) = 0;
  // On the comm stream, in its order: SENDS and RECVS (device memory) as one group, all
  // started together (NCCL: one ncclGroupStart/End); the stream goes on once all are done.
  // Every send must match a receive of the same size that its peer queues in the same
  // group of its own, and there is at most one transfer each way per peer.
  virtual void send_recv(std::vector<PeerSend> sends, std::vector<PeerRecv> recvs) = 0;
  // The compute stream waits for all work queued on the comm stream so far (reductions and
  // the rest); returns without waiting.
  virtual void compute_waits_for_comm() = 0;
  // Throws CommError if the communicator has reported an asynchronous error (a peer that
  // died), after aborting it; never waits.
  virtual void poll_errors() = 0;
  // The marks since the last read (empty when nothing was queued), waiting for the device to
  // reach them while polling for errors. Call after the step's work has been queued.
  virtual DeviceCommTimes read_times() = 0;
};

// comm.backend: nccl: one NCCL communicator over HOST's ranks (made collectively), a comm
// stream and its events. A peer that stops answering for TIMEOUT_S seconds, or an
// asynchronous NCCL error, is a CommError naming this rank and its neighbours. Throws
// InputError "comm.backend: nccl is not available: <why>" where this build has no NCCL or
// no GPU is usable (nccl::unavailable_reason(), comm/nccl/nccl_comm.h).
std::unique_ptr<DeviceComm> make_nccl_device_comm(Communicator& host, double timeout_s);

}  // namespace ringstep
