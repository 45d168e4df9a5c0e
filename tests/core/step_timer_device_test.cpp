// StepTimer timing on a device, driven by a fake DeviceClock whose marks have known times:
// the timed phases and the step come from the device marks, comm and recompute from the
// host, the sum rule holds, steps are read in order, and the device is waited on once.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/profiler.h"
#include "core/runtime.h"
#include "core/fake_device_clock.h"

namespace ringstep {
namespace {

using ringstep::testing::FakeDeviceClock;

TEST(StepTimerOnDevice, PhasesComeFromDeviceMarksReadOncePerInterval) {
  std::vector<double> marks;
  std::vector<int> waits;
  auto clock = std::make_unique<FakeDeviceClock>(&marks, &waits);
  FakeDeviceClock* dev = clock.get();
  int64_t host_ns = 0;
  StepTimer timer(true, [&] { return host_ns; });
  timer.time_on_device(std::move(clock));
  ASSERT_TRUE(timer.on_device());

  for (int step = 0; step < 2; ++step) {
    timer.begin_step();
    auto t0 = timer.begin_phase();  // data: the device idles 1 ms waiting for it
    dev->now_ms += 1;
    host_ns += 1'000'000;
    timer.end_phase(&PhaseTimes::data, t0);
    t0 = timer.begin_phase();  // forward: 0.1 ms of host launches, 10 ms on the device
    dev->now_ms += 10;
    host_ns += 100'000;
    timer.end_phase(&PhaseTimes::forward, t0);
    t0 = timer.begin_phase();
    dev->now_ms += 20 + step;
    timer.end_phase(&PhaseTimes::backward, t0);
    dev->now_ms += 3;  // the comm wait, not a device phase
    t0 = timer.begin_phase();
    dev->now_ms += 2;
    timer.end_phase(&PhaseTimes::optimizer, t0);
    timer.add_ms(&PhaseTimes::recompute, 4);
    const PhaseTimes& host = timer.end_step(/*comm_ms=*/5, /*comm_exposed_ms=*/3);
    EXPECT_DOUBLE_EQ(host.forward, 0.1);  // what end_step returns is still the host's
  }
  EXPECT_TRUE(waits.empty());  // nothing waited inside the steps
  const std::vector<PhaseTimes> t = timer.read_device();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(waits.size(), 1u);
  for (int step = 0; step < 2; ++step) {
    EXPECT_DOUBLE_EQ(t[step].data, 1);
    EXPECT_DOUBLE_EQ(t[step].forward, 10);
    EXPECT_DOUBLE_EQ(t[step].backward, 20 + step);
    EXPECT_DOUBLE_EQ(t[step].optimizer, 2);
    EXPECT_DOUBLE_EQ(t[step].step, 36 + step);
    EXPECT_DOUBLE_EQ(t[step].comm, 5);
    EXPECT_DOUBLE_EQ(t[step].comm_exposed, 3);
    EXPECT_DOUBLE_EQ(t[step].recompute, 4);
    EXPECT_DOUBLE_EQ(t[step].other, 0);
  }
  EXPECT_TRUE(marks.empty());  // cleared: the next interval reuses the marks
  EXPECT_TRUE(timer.read_device().empty());
}

TEST(StepTimerOnDevice, CpuHasNoDeviceClockAndADisabledTimerTakesNone) {
  EXPECT_EQ(runtime(Device::cpu).make_clock(10), nullptr);
  std::vector<double> marks;
  std::vector<int> waits;
  StepTimer off(false);
  off.time_on_device(std::make_unique<FakeDeviceClock>(&marks, &waits));
  EXPECT_FALSE(off.on_device());
}

}  // namespace
}  // namespace ringstep
