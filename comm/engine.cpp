#include "comm/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "comm/backoff.h"
#include "comm/reduce.h"

namespace ringstep {

// A queued collective and the request its handle waits on.
struct CommEngine::Task final : CommRequest {
  CollectiveDesc desc;
  std::function<void(Communicator&)> fn;
  int64_t queued_ns = 0, start_ns = 0;

  bool test() override {
    if (!done.load(std::memory_order_acquire)) return false;
    if (error) std::rethrow_exception(error);
    return true;
  }
  void wait() override {  // sleeps; the engine thread notifies
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done.load(std::memory_order_acquire); });
    if (error) std::rethrow_exception(error);
  }
  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(m);
      error = std::move(e);
      done.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }

 private:
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::exception_ptr error;
};

CommEngine::CommEngine(Communicator& comm, EngineOptions opts) : comm_(comm), opts_(opts) {
  comm.check_thread_support();
  thread_ = std::thread([this] { run(); });
  if (opts_.timeout_s > 0) watchdog_thread_ = std::thread([this] { watchdog(); });
}

CommEngine::~CommEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  watch_.notify_all();
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
}

CommHandle CommEngine::enqueue(const CollectiveDesc& desc, std::function<void(Communicator&)> fn) {
  auto task = std::make_shared<Task>();
  task->desc = desc;
  task->fn = std::move(fn);
  task->queued_ns = steady_now_ns();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw CommError("CommEngine: enqueue after shutdown");
    queue_.push_back(task);
    ++unfinished_;
  }
  wake_.notify_one();
  return CommHandle(task);
}

CommHandle CommEngine::enqueue_allreduce(void* buf, size_t count, DType dt, AllreduceAlgo algo,
                                         bool average, uint64_t tag, std::function<void()> before,
                                         std::function<void()> after) {
  RingOptions ring = opts_.ring;
  ring.op = ReduceOp::sum;
  ring.average = average;
  return enqueue({"allreduce", tag, count, dt},
                 [=, before = std::move(before), after = std::move(after)](Communicator& comm) {
                   if (before) before();
                   if (algo == AllreduceAlgo::ring) {
                     ring_allreduce(comm, buf, count, dt, ring);
                   } else {
                     // The async form, so the wait is ours (Backoff) rather than MPI's.
                     comm.allreduce_async(buf, count, dt, ring.op).wait();
                     if (average) divide_by(buf, count, dt, static_cast<float>(comm.size()));
                   }
                   if (after) after();
                 });
}

void CommEngine::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  drained_.wait(lock, [&] { return unfinished_ == 0; });
  if (failure_) std::rethrow_exception(failure_);
}

std::vector<CommSpan> CommEngine::drain_spans() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(spans_, {});
}

void CommEngine::run() {
  set_thread_timer_slack_ns(1000);
  thread_wait_policy() = opts_.wait;
  for (;;) {
    std::shared_ptr<Task> task;
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
      task->start_ns = steady_now_ns();
      running_ = task;
      error = failure_;
    }
    watch_.notify_one();
    if (!error) {
      try {
        const bool first_use = seen_tags_.insert({task->desc.op, task->desc.tag}).second;
        if (first_use || opts_.check_every_call) check_metadata(task->desc);
        task->fn(comm_);
      } catch (...) {
        error = std::current_exception();
      }
    }
    const int64_t end_ns = steady_now_ns();
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.reset();
      if (error && !failure_) failure_ = error;
      if (!error) {
        const CollectiveDesc& d = task->desc;
        spans_.push_back({d.op, d.tag, task->queued_ns, task->start_ns, end_ns,
                          d.count * dtype_size(d.dtype)});
      }
      --unfinished_;
    }
    task->finish(error);
    drained_.notify_all();
  }
}

namespace {

struct MetaRecord {  // fixed layout, exchanged as bytes
  char op[24];
  uint64_t tag;
  uint64_t count;
  uint32_t dtype;
  uint32_t pad;
};

MetaRecord make_record(const CollectiveDesc& d) {
  MetaRecord rec{};
  std::strncpy(rec.op, d.op.c_str(), sizeof(rec.op) - 1);
  rec.tag = d.tag;
  rec.count = d.count;
  rec.dtype = static_cast<uint32_t>(d.dtype);
  return rec;
}

bool same(const MetaRecord& a, const MetaRecord& b) {
  return std::strncmp(a.op, b.op, sizeof(a.op)) == 0 && a.tag == b.tag && a.count == b.count &&
         a.dtype == b.dtype;
}

std::string describe(const MetaRecord& rec) {
  const auto dt = static_cast<DType>(rec.dtype);
  return std::string(rec.op) + " tag " + std::to_string(rec.tag) + " count " +
         std::to_string(rec.count) + " dtype " + (rec.dtype <= 2 ? dtype_name(dt) : "?");
}

}  // namespace

void CommEngine::check_metadata(const CollectiveDesc& desc) {
  std::vector<MetaRecord> all(static_cast<size_t>(comm_.size()));
  all[static_cast<size_t>(comm_.rank())] = make_record(desc);
  comm_.allgather_bytes(all.data(), sizeof(MetaRecord));
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r) {
    if (!same(all[r], all[0])) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differ.empty()) return;
  std::string msg = "collective mismatch across ranks: rank(s) " + differ +
                    " disagree with rank 0 on the collective's op, tag, count or dtype (";
  for (size_t r = 0; r < all.size(); ++r)
    msg += (r ? "; rank " : "rank ") + std::to_string(r) + ": " + describe(all[r]);
  throw CommError(msg + ")");
}

void CommEngine::watchdog() {
  const auto timeout_ns = static_cast<int64_t>(opts_.timeout_s * 1e9);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!running_) {
      watch_.wait(lock, [&] { return stop_ || running_; });
      continue;
    }
    const int64_t late_ns = steady_now_ns() - (running_->start_ns + timeout_ns);
    if (late_ns >= 0) {
      const CollectiveDesc& d = running_->desc;
      const int peer = comm_.blocked_on_peer();
      const std::string waiting =
          peer >= 0 ? "waiting on rank " + std::to_string(peer) + ", which is lost or stuck"
                    : "inside a transport collective; a peer is lost or stuck";
      std::fprintf(stderr,
                   "[ringstep rank %d] comm watchdog: %s tag %llu (%zu bytes) has not completed "
                   "after %.1f s; %s. Aborting the job.\n",
                   comm_.rank(), d.op.c_str(), static_cast<unsigned long long>(d.tag),
                   d.count * dtype_size(d.dtype), opts_.timeout_s, waiting.c_str());
      std::fflush(stderr);
      comm_.abort_job(1);
    }
    watch_.wait_for(lock, std::chrono::nanoseconds(std::min<int64_t>(-late_ns, 1'000'000'000)));
  }
}

}  // namespace ringstep
