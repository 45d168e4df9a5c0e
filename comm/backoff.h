// How ringstep waits on communication. Open MPI's own waits spin; with one core per rank a
// comm thread that spins takes half the core from the training thread. A Backoff polls
// hard for spin_ns after the last progress (a peer about to answer), then yields the core
// (sched_yield) until yield_ns, then sleeps in steps doubling from 1 us to max_sleep_ns.
// Every successful poll should call reset().
//
// The policy is per thread: thread_wait_policy() starts as WaitPolicy::polite(), the
// CommEngine's thread uses EngineOptions::wait (WaitPolicy::sleeping() where it shares its
// rank's cores with the compute threads), and a thread that owns its core (the bench) may
// switch to WaitPolicy::spin() with ScopedWaitPolicy.
#pragma once

#include <cstdint>

#include "core/profiler.h"  // steady_now_ns

namespace ringstep {

struct WaitPolicy {
  int64_t spin_ns = 10'000;       // pure polling after the last progress
  int64_t yield_ns = 100'000;     // then sched_yield between polls until this much waited
  int64_t max_sleep_ns = 64'000;  // then nanosleep from 1 us doubling up to this

  static WaitPolicy polite() { return {}; }
  static WaitPolicy spin() { return {INT64_MAX, INT64_MAX, 64'000}; }
  // For a thread whose core is busy computing: no polling and no yielding, which take the
  // core from the compute thread; sleeps from 1 us doubling to 0.5 ms, each poll in
  // between costing a wake-up (docs/perf-log.md section 16).
  static WaitPolicy sleeping() { return {0, 0, 500'000}; }
};

// The calling thread's policy (read by every Backoff constructed on it).
WaitPolicy& thread_wait_policy();

class ScopedWaitPolicy {
 public:
  explicit ScopedWaitPolicy(const WaitPolicy& p) : saved_(thread_wait_policy()) {
    thread_wait_policy() = p;
  }
  ~ScopedWaitPolicy() { thread_wait_policy() = saved_; }
  ScopedWaitPolicy(const ScopedWaitPolicy&) = delete;
  ScopedWaitPolicy& operator=(const ScopedWaitPolicy&) = delete;

 private:
  WaitPolicy saved_;
};

class Backoff {
 public:
  Backoff() : policy_(thread_wait_policy()) {}
  explicit Backoff(const WaitPolicy& policy) : policy_(policy) {}
  void pause();  // one step of waiting, chosen by how long we have been idle
  void reset() {
    idle_since_ns_ = 0;
    sleep_ns_ = 1'000;
  }

 private:
  WaitPolicy policy_;
  int64_t idle_since_ns_ = 0;
  int64_t sleep_ns_ = 1'000;
};

// Sets this thread's timer slack (Linux; the default 50 us turns every short nanosleep into
// a 50 us one). No-op elsewhere.
void set_thread_timer_slack_ns(long ns);

}  // namespace ringstep
