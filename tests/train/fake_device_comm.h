// A DeviceComm (comm/device_comm.h) on host memory over MPI, so that GradSync's device path
// runs on the CPU under mpirun. Its "comm stream" is a thread that runs the reductions in
// the order queued, each by the call the comm engine makes for a bucket (the ring, or the
// transport's AllReduce and a division), on a private duplicate of the world communicator:
// the device path must then give the host path's bits. Its "compute stream" is the calling
// thread, whose work is done by the time it queues anything: a bucket's gradients are ready
// when reduce_mean() is called, and compute_waits_for_comm() is a wait of the calling thread
// (the compute stream waiting on the comm stream), marked before and after. on_comm_stream's
// work and send_recv's MPI transfers run on the stream thread too, in the order queued; its
// memory is the host's (the cpu runtime) and its sign kernels are the CUDA kernels' twins.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/device_comm.h"
#include "comm/engine.h"
#include "comm/mpi_communicator.h"
#include "comm/reduce.h"
#include "comm/ring_allreduce.h"
#include "comm/sign_twins.h"
#include "core/profiler.h"
#include "core/runtime.h"

namespace ringstep::testing {

class FakeDeviceComm final : public DeviceComm {
 public:
  // Over PARENT's ranks (collective over them: MPI_Comm_dup).
  explicit FakeDeviceComm(MPI_Comm parent = MPI_COMM_WORLD)
      : comm_(parent), stream_([this] { run(); }) {}
  ~FakeDeviceComm() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    stream_.join();
  }

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  Runtime& memory() override { return runtime(Device::cpu); }
  SignKernels& sign_kernels() override { return twins_; }  // the CUDA kernels' CPU twins

  void reserve(const std::vector<size_t>& counts) override { reserved = counts; }

  void reduce_mean(float* buf, size_t count, AllreduceAlgo algo, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t i = times_.spans.size();
    times_.spans.push_back({"allreduce", tag, steady_now_ns(), 0, 0, count * sizeof(float)});
    ++queued_;
    queue_.push_back([this, buf, count, algo, i] {
      const int64_t start = steady_now_ns();
      RingOptions ring = EngineOptions{}.ring;  // as CommEngine::enqueue_allreduce
      ring.average = true;
      if (algo == AllreduceAlgo::ring) {
        ring_allreduce(comm_, buf, count, DType::f32, ring);
      } else {
        comm_.allreduce_async(buf, count, DType::f32, ReduceOp::sum).wait();
        divide_by(buf, count, DType::f32, float(comm_.size()));
      }
      const int64_t end = steady_now_ns();
      std::lock_guard<std::mutex> lock(mu_);
      times_.spans[i].start_ns = start;
      times_.spans[i].end_ns = end;
    });
    cv_.notify_all();
  }

  // Runs F on the stream thread, with no stream (the kernels' host twins run at once).
  void on_comm_stream(std::function<void(StreamHandle)> f) override {
    queue([f = std::move(f)] { f(nullptr); });
  }
  // MPI_Irecv and MPI_Isend of bytes on the private communicator, then MPI_Waitall.
  void send_recv(std::vector<PeerSend> sends, std::vector<PeerRecv> recvs) override {
    queue([this, sends = std::move(sends), recvs = std::move(recvs)] {
      std::vector<MPI_Request> pending;
      for (const PeerRecv& r : recvs)
        MPI_Irecv(r.buf, int(r.bytes), MPI_BYTE, r.peer, kSendRecvTag, comm_.mpi_comm(),
                  &pending.emplace_back());
      for (const PeerSend& s : sends)
        MPI_Isend(s.buf, int(s.bytes), MPI_BYTE, s.peer, kSendRecvTag, comm_.mpi_comm(),
                  &pending.emplace_back());
      MPI_Waitall(int(pending.size()), pending.data(), MPI_STATUSES_IGNORE);
    });
  }

  void compute_waits_for_comm() override {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t before = steady_now_ns();
    cv_.wait(lock, [&] { return done_ == queued_ || failure_; });
    times_.waits.push_back({before, steady_now_ns()});
    ++compute_waits;
  }

  void poll_errors() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_) std::rethrow_exception(failure_);
  }

  DeviceCommTimes read_times() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == queued_ || failure_; });
    if (failure_) std::rethrow_exception(failure_);
    return std::exchange(times_, {});
  }

  int compute_waits = 0;         // calls of compute_waits_for_comm (the training thread's only)
  std::vector<size_t> reserved;  // the last reserve()'s counts

 private:
  static constexpr int kSendRecvTag = 0x5352;

  void queue(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    ++queued_;
    queue_.push_back(std::move(job));
    cv_.notify_all();
  }

  void run() {
    for (;;) {
      std::function<void()> job;
      bool failed = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        failed = bool(failure_);
      }
      try {
        if (!failed) job();  // after a failure the stream runs nothing more
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        failure_ = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++done_;
      }
      cv_.notify_all();
    }
  }

  MpiCommunicator comm_;
  HostSignKernels twins_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  DeviceCommTimes times_;
  std::thread stream_;  // last: started once the rest is built
};

}  // namespace ringstep::testing
