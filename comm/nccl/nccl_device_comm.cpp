#include "comm/nccl/nccl_device_comm.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/nccl_comm.h"
#include "comm/nccl/sign_kernels.h"
#include "core/cuda/cuda_check.h"
#include "core/profiler.h"
#include "core/runtime.h"

namespace ringstep::nccl {
namespace {

// The compute stream: the legacy default stream, where the CUDA backend queues its work.
const cudaStream_t kCompute = cudaStreamLegacy;

}  // namespace

struct NcclDeviceComm::Impl {
  Communicator& host;
  NcclComm comm;
  CudaSignKernels sign_kernels;
  double timeout_s;
  // The watchdog: while a step's reductions are queued and not yet read (pending_since_ns,
  // 0 = none), it polls NCCL's asynchronous error once a second; on an error, or after
  // timeout_s pending, it says why, naming this rank and its ring neighbours, and aborts the
  // job: the training thread may be blocked in a device read that would never return.
  std::atomic<int64_t> pending_since_ns{0};
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool stop = false;
  std::thread watchdog;
  cudaStream_t stream = nullptr;        // the comm stream
  cudaEvent_t compute_ready = nullptr;  // behind_compute's (not one of a step's marks)
  bool other_work = false;  // queued outside reduce_mean since the last compute_waits_for_comm
  std::vector<cudaEvent_t> events;  // the pool; events[0 .. used) are this step's marks
  size_t used = 0;
  int64_t origin_ns = 0;  // host time of the step's first mark (events[0])
  struct Reduction {
    size_t ready, start, end;  // indices into events
    uint64_t tag;
    size_t bytes;
  };
  struct Wait {
    size_t before, after;
  };
  std::vector<Reduction> reductions;
  std::vector<Wait> waits;

  Impl(Communicator& h, double t) : host(h), comm(h), timeout_s(t) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    watchdog = std::thread([this] { watch(); });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(watch_mu);
      stop = true;
    }
    watch_cv.notify_all();
    watchdog.join();
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    if (compute_ready) cudaEventDestroy(compute_ready);
    if (stream) cudaStreamDestroy(stream);
  }

  void watch() {
    std::unique_lock<std::mutex> lock(watch_mu);
    while (!watch_cv.wait_for(lock, std::chrono::seconds(1), [&] { return stop; })) {
      const int64_t since = pending_since_ns.load();
      if (since == 0) continue;
      std::string why = comm.async_error();
      const double waited = double(steady_now_ns() - since) / 1e9;
      if (why.empty() && waited < timeout_s) continue;
      if (why.empty())
        why = "the step's gradient reductions have not completed after " +
              std::to_string(int(waited)) + " s (a peer is lost or stuck)";
      const int n = comm.size(), r = comm.rank();
      std::fprintf(stderr,
                   "[ringstep rank %d] NCCL watchdog: %s; this rank's ring neighbours are ranks "
                   "%d and %d. Aborting the job.\n",
                   r, why.c_str(), (r + n - 1) % n, (r + 1) % n);
      std::fflush(stderr);
      host.abort_job(1);
    }
  }
  // A timing event recorded on STREAM now; returns its index. The first of a step is the
  // origin, recorded on the compute stream.
  size_t mark(cudaStream_t s) {
    if (used == 0) {
      origin_ns = steady_now_ns();
      record(kCompute);
    }
    return record(s);
  }
  size_t record(cudaStream_t s) {
    if (used == events.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // with timing
      events.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events[used], s));
    return used++;
  }
  // Blocks until events[i] has happened, polling NCCL's asynchronous error.
  void wait_for(size_t i) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaEventQuery(events[i]);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CUDA_CHECK(q);
      comm.check_async_error();
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_s)
        comm.abort_with("a gradient reduction made no progress for " +
                        std::to_string(int(timeout_s)) + " s (a peer died or stopped calling)");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // The comm stream waits for the compute stream's work so far, for work queued outside
  // reduce_mean (on_comm_stream, send_recv).
  void behind_compute() {
    if (!compute_ready)
      CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(compute_ready, kCompute));
    CUDA_CHECK(cudaStreamWaitEvent(stream, compute_ready, 0));
    other_work = true;
  }
  int64_t at(size_t i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events[0], events[i]));
    return origin_ns + int64_t(std::llround(double(ms) * 1e6));
  }
};

NcclDeviceComm::NcclDeviceComm(Communicator& host, double timeout_s)
    : impl_(std::make_unique<Impl>(host, timeout_s)) {}

NcclDeviceComm::~NcclDeviceComm() = default;

int NcclDeviceComm::rank() const { return impl_->comm.rank(); }
int NcclDeviceComm::size() const { return impl_->comm.size(); }

namespace {

RingOptions mean_options() {
  RingOptions opt;
  opt.average = true;
  return opt;
}

}  // namespace

Runtime& NcclDeviceComm::memory() { return runtime(Device::cuda); }
SignKernels& NcclDeviceComm::sign_kernels() { return impl_->sign_kernels; }

void NcclDeviceComm::reserve(const std::vector<size_t>& counts) {
  for (size_t c : counts) impl_->comm.reserve_ring(c, DType::f32, mean_options());
}

void NcclDeviceComm::reduce_mean(float* buf, size_t count, AllreduceAlgo algo, uint64_t tag) {
  Impl& m = *impl_;
  int64_t idle = 0;
  m.pending_since_ns.compare_exchange_strong(idle, steady_now_ns());
  const size_t ready = m.mark(kCompute);
  CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.events[ready], 0));
  const size_t start = m.mark(m.stream);
  if (algo == AllreduceAlgo::ring) {
    m.comm.allreduce_ring(buf, count, DType::f32, mean_options(), m.stream);
  } else {
    m.comm.allreduce_native(buf, count, DType::f32, /*average=*/true, m.stream);
  }
  const size_t end = m.mark(m.stream);
  m.reductions.push_back({ready, start, end, tag, count * sizeof(float)});
}

void NcclDeviceComm::on_comm_stream(std::function<void(StreamHandle)> f) {
  Impl& m = *impl_;
  m.behind_compute();
  f(m.stream);
}

void NcclDeviceComm::send_recv(std::vector<PeerSend> sends, std::vector<PeerRecv> recvs) {
  Impl& m = *impl_;
  m.behind_compute();
  m.comm.send_recv(sends, recvs, m.stream);
}

void NcclDeviceComm::compute_waits_for_comm() {
  Impl& m = *impl_;
  if (m.reductions.empty() && !m.other_work) return;
  m.other_work = false;
  const size_t done = m.mark(m.stream);
  const size_t before = m.mark(kCompute);
  CUDA_CHECK(cudaStreamWaitEvent(kCompute, m.events[done], 0));
  const size_t after = m.mark(kCompute);
  m.waits.push_back({before, after});
}

void NcclDeviceComm::poll_errors() { impl_->comm.check_async_error(); }

DeviceCommTimes NcclDeviceComm::read_times() {
  Impl& m = *impl_;
  DeviceCommTimes t;
  for (size_t i = 0; i < m.used; ++i) m.wait_for(i);
  m.pending_since_ns = 0;
  for (const Impl::Reduction& r : m.reductions)
    t.spans.push_back({"allreduce", r.tag, m.at(r.ready), m.at(r.start), m.at(r.end), r.bytes});
  for (const Impl::Wait& w : m.waits) t.waits.push_back({m.at(w.before), m.at(w.after)});
  m.reductions.clear();
  m.waits.clear();
  m.used = 0;
  return t;
}

}  // namespace ringstep::nccl
