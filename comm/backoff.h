// How ringstep waits on communication without stealing the core. Open MPI's own waits spin;
// with one core per rank the comm thread's spin would halve the training thread's speed.
// Backoff polls hard for a few microseconds (a peer that is about to answer), then yields
// the core (sched_yield) for a while, then sleeps in growing steps up to max_sleep_ns.
// Every successful poll should call reset(). Not thread-safe; one per waiting loop.
#pragma once

#include <cstdint>

namespace ringstep {

struct WaitPolicy {
  int64_t spin_ns = 2'000;       // pure polling after the last progress
  int64_t yield_ns = 50'000;     // then sched_yield between polls until this much waited
  int64_t max_sleep_ns = 64'000; // then nanosleep from 1 us doubling up to this
};

// The process-wide default policy (read by every Backoff constructed without one).
WaitPolicy& default_wait_policy();

int64_t steady_now_ns();

class Backoff {
 public:
  explicit Backoff(const WaitPolicy& policy = default_wait_policy()) : policy_(policy) {}
  void pause();  // one step of waiting, chosen by how long we have been idle
  void reset() { idle_since_ns_ = 0; sleep_ns_ = 1'000; }

 private:
  WaitPolicy policy_;
  int64_t idle_since_ns_ = 0;
  int64_t sleep_ns_ = 1'000;
};

// Sets this thread's timer slack to `ns` (Linux; the default 50 us would make every short
// nanosleep a 50 us one). No-op elsewhere.
void set_thread_timer_slack_ns(long ns);

}  // namespace ringstep
