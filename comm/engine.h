// CommEngine: one per rank. Its thread runs queued collectives one at a time, in enqueue
// order (identical on every rank as long as every rank enqueues the same sequence), and is
// the only thread that uses the Communicator while it has work; the training thread
// enqueues and later waits. The constructor asks the transport whether it allows that
// (Communicator::check_thread_support; MPI needs at least MPI_THREAD_SERIALIZED).
//
// Waiting never hard-spins the core: the engine thread sleeps on a condition variable when
// idle and polls in-flight messages under comm/backoff.h's policy; a caller of wait() sleeps
// on a condition variable until its collective is done.
//
// Safety: the first time a tag is used (or every time with check_every_call), the ranks
// exchange (op, tag, count, dtype) and every rank throws the same CommError naming the
// ranks that disagree. A watchdog thread aborts the job (Communicator::abort_job) with a
// message naming the collective and the peer waited on when one collective has been in
// flight for timeout_s. Thread-safe: enqueue, wait, wait_all and drain_spans may be called
// from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/backoff.h"
#include "comm/communicator.h"
#include "comm/ring_allreduce.h"

namespace ringstep {

// One collective as run by the engine, for the profiler's `comm` lane.
struct CommSpan {
  std::string op;        // "allreduce", ...
  uint64_t tag = 0;      // the caller's id (e.g. the bucket index)
  int64_t queued_ns = 0;  // handed to the engine (steady_clock, since its epoch)
  int64_t start_ns = 0;   // the engine began it
  int64_t end_ns = 0;
  size_t bytes = 0;  // this rank's buffer size
};

// What every rank must agree on for one collective.
struct CollectiveDesc {
  std::string op;
  uint64_t tag = 0;
  size_t count = 0;
  DType dtype = DType::f32;
};

struct EngineOptions {
  double timeout_s = 300;                  // watchdog; 0 = off
  bool check_every_call = false;           // metadata check on every collective, not only first use
  RingOptions ring;                        // for ring allreduces (op, average set per call)
  WaitPolicy wait = WaitPolicy::polite();  // how the engine thread waits on messages
};

class CommEngine {
 public:
  CommEngine(Communicator& comm, EngineOptions opts = {});
  ~CommEngine();  // runs what is queued, then stops
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  // Queues fn(comm) to run on the engine thread. The returned handle completes when fn has
  // returned; wait() rethrows what fn threw. Once a collective has failed, every later one
  // fails with the same error without running (the ranks may be out of step).
  CommHandle enqueue(const CollectiveDesc& desc, std::function<void(Communicator&)> fn);
  // In-place sum AllReduce of buf by `algo`, divided by the world size when average. BEFORE
  // and AFTER, when given, run on the engine thread just before and after it, inside its
  // span (a staged buffer's copies in and out).
  CommHandle enqueue_allreduce(void* buf, size_t count, DType dt, AllreduceAlgo algo, bool average,
                               uint64_t tag, std::function<void()> before = {},
                               std::function<void()> after = {});

  void wait(const CommHandle& handle) { handle.wait(); }
  void wait_all();  // until everything enqueued so far has run; rethrows the first failure
  std::vector<CommSpan> drain_spans();  // spans completed since the last call, in order

  Communicator& comm() { return comm_; }

 private:
  struct Task;
  void run();
  void watchdog();
  void check_metadata(const CollectiveDesc& desc);

  Communicator& comm_;
  EngineOptions opts_;
  std::mutex mu_;
  std::condition_variable wake_;     // engine thread: work or stop
  std::condition_variable drained_;  // wait_all
  std::condition_variable watch_;    // watchdog: a task started, or stop
  std::deque<std::shared_ptr<Task>> queue_;
  std::shared_ptr<Task> running_;  // under mu_
  size_t unfinished_ = 0;          // queued + running
  bool stop_ = false;
  std::exception_ptr failure_;  // first failure; later tasks fail with it
  std::vector<CommSpan> spans_;
  std::set<std::pair<std::string, uint64_t>> seen_tags_;  // (op, tag); engine thread only
  std::thread thread_;
  std::thread watchdog_thread_;
};

}  // namespace ringstep
