// StepTimer driven by a fake clock: phases of known length land in the right fields to the
// nanosecond, the sum rule holds, and a disabled timer never reads the clock.
#include "core/profiler.h"

#include <gtest/gtest.h>

namespace ringstep {
namespace {

struct FakeClock {
  int64_t now = 1'000'000'000;
  int reads = 0;
  StepTimer::NowNs fn() {
    return [this] {
      ++reads;
      return now;
    };
  }
  void advance_ms(double ms) { now += int64_t(ms * 1e6); }
};

TEST(StepTimer, AttributesInjectedPhasesAndKeepsTheSumRule) {
  FakeClock clock;
  StepTimer timer(true, clock.fn());
  timer.begin_step();
  for (int micro = 0; micro < 2; ++micro) {  // two micro-batches, as the trainer runs them
    int64_t t0 = timer.mark();
    clock.advance_ms(1.5);
    timer.add(&PhaseTimes::data, t0);
    t0 = timer.mark();
    clock.advance_ms(20);
    timer.add(&PhaseTimes::forward, t0);
    t0 = timer.mark();
    clock.advance_ms(40);
    timer.add(&PhaseTimes::backward, t0);
  }
  clock.advance_ms(7);  // waiting on communication: reported by the comm engine
  const int64_t t0 = timer.mark();
  clock.advance_ms(5);
  timer.add(&PhaseTimes::optimizer, t0);
  clock.advance_ms(0.25);  // unattributed work
  const PhaseTimes& pt = timer.end_step(/*comm_ms=*/30, /*comm_exposed_ms=*/7);
  EXPECT_DOUBLE_EQ(pt.data, 3.0);
  EXPECT_DOUBLE_EQ(pt.forward, 40.0);
  EXPECT_DOUBLE_EQ(pt.backward, 80.0);
  EXPECT_DOUBLE_EQ(pt.optimizer, 5.0);
  EXPECT_DOUBLE_EQ(pt.comm, 30.0);
  EXPECT_DOUBLE_EQ(pt.comm_exposed, 7.0);
  EXPECT_DOUBLE_EQ(pt.step, 135.25);
  EXPECT_DOUBLE_EQ(pt.other, 0.25);
  EXPECT_DOUBLE_EQ(pt.data + pt.forward + pt.backward + pt.optimizer + pt.comm_exposed + pt.other,
                   pt.step);
  // A new step starts from zero.
  timer.begin_step();
  EXPECT_DOUBLE_EQ(timer.times().forward, 0.0);
}

TEST(StepTimer, DisabledTimerNeverReadsTheClock) {
  FakeClock clock;
  StepTimer timer(false, clock.fn());
  timer.begin_step();
  const int64_t t0 = timer.mark();
  clock.advance_ms(10);
  timer.add(&PhaseTimes::forward, t0);
  const PhaseTimes& pt = timer.end_step(3, 2);
  EXPECT_EQ(clock.reads, 0);
  EXPECT_EQ(pt.step, 0.0);
  EXPECT_EQ(pt.forward, 0.0);
}

}  // namespace
}  // namespace ringstep
