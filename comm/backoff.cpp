#include "comm/backoff.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ringstep {

WaitPolicy& thread_wait_policy() {
  thread_local WaitPolicy policy = WaitPolicy::polite();
  return policy;
}

void Backoff::pause() {
  const int64_t now = steady_now_ns();
  if (idle_since_ns_ == 0) idle_since_ns_ = now;
  const int64_t idle = now - idle_since_ns_;
  if (idle < policy_.spin_ns) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
    return;
  }
  if (idle < policy_.yield_ns) {
    sched_yield();
    return;
  }
  const timespec ts{0, static_cast<long>(sleep_ns_)};
  nanosleep(&ts, nullptr);
  sleep_ns_ = std::min(sleep_ns_ * 2, std::max<int64_t>(policy_.max_sleep_ns, 1'000));
}

void set_thread_timer_slack_ns(long ns) {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(ns), 0, 0, 0);
#else
  (void)ns;
#endif
}

}  // namespace ringstep
