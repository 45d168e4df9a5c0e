// The op clock timing on a device, driven by a fake DeviceClock whose marks have known
// times: each op is the device time between its two marks (not the host's), the phase's
// ops are settled by one wait at stop(), trace spans carry the device durations, and an
// off clock makes no mark.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/fake_device_clock.h"
#include "core/op_profile.h"
#include "core/trace.h"

namespace ringstep {
namespace {

using ringstep::testing::FakeDeviceClock;

TEST(OpClockOnDevice, OpsAreDeviceTimeBetweenMarksSettledByOneWait) {
  std::vector<double> marks;
  std::vector<int> waits;
  auto owned = std::make_unique<FakeDeviceClock>(&marks, &waits);
  FakeDeviceClock* dev = owned.get();
  OpClock clock;
  clock.time_on_device(std::move(owned));
  OpProfile profile;
  TraceRecorder trace;

  clock.start(&profile, OpPhase::backward, &trace, 7);
  for (double ms : {2.0, 3.5}) {  // two calls of one op, 1 ms of something else between
    dev->now_ms += 1;
    const int64_t t0 = clock.begin();
    dev->now_ms += ms;
    clock.end(Op::mlp_fc, t0, {100, 10});
  }
  const int64_t t0 = clock.begin();
  dev->now_ms += 0.25;
  clock.end(Op::gelu, t0, {1, 2});
  EXPECT_TRUE(waits.empty());                 // nothing waited while the phase runs
  EXPECT_EQ(profile.at(OpPhase::backward, Op::mlp_fc).calls, 0);  // settled at stop()
  clock.stop();
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0], 6);  // the phase's last mark: start + 2 per op
  EXPECT_FALSE(clock.on());
  EXPECT_TRUE(marks.empty());  // cleared for the next phase

  const OpStat& fc = profile.at(OpPhase::backward, Op::mlp_fc);
  EXPECT_EQ(fc.calls, 2);
  EXPECT_DOUBLE_EQ(fc.ms, 5.5);
  EXPECT_DOUBLE_EQ(fc.flops, 200);
  EXPECT_DOUBLE_EQ(fc.bytes, 20);
  EXPECT_DOUBLE_EQ(profile.at(OpPhase::backward, Op::gelu).ms, 0.25);
  EXPECT_DOUBLE_EQ(profile.phase_ms(OpPhase::forward), 0);

  // The trace's spans: device durations, in device order, one microsecond apart as marked.
  const auto path = std::filesystem::temp_directory_path() / "ringstep_op_clock_trace.json";
  trace.write(path.string(), 0);
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
  std::filesystem::remove(path);
  std::vector<double> dur_us, ts_us;
  for (const auto& e : doc["traceEvents"])
    if (e.value("ph", "") == "X") {
      dur_us.push_back(e["dur"].get<double>());
      ts_us.push_back(e["ts"].get<double>());
    }
  ASSERT_EQ(dur_us.size(), 3u);
  EXPECT_NEAR(dur_us[0], 2000, 1e-3);
  EXPECT_NEAR(dur_us[1], 3500, 1e-3);
  EXPECT_NEAR(dur_us[2], 250, 1e-3);
  EXPECT_NEAR(ts_us[1] - ts_us[0], 3000, 1e-3);  // 2 ms op + 1 ms gap
  EXPECT_NEAR(ts_us[2] - ts_us[1], 3500, 1e-3);
}

TEST(OpClockOnDevice, OffClockMakesNoMarkAndWaitsForNothing) {
  std::vector<double> marks;
  std::vector<int> waits;
  OpClock clock;
  clock.time_on_device(std::make_unique<FakeDeviceClock>(&marks, &waits));
  EXPECT_EQ(clock.begin(), 0);
  clock.end(Op::qkv, 0, {1, 1});
  clock.start(nullptr, OpPhase::forward, nullptr, 1);  // a null profile: stays off
  EXPECT_EQ(clock.begin(), 0);
  clock.stop();
  EXPECT_TRUE(marks.empty());
  EXPECT_TRUE(waits.empty());
}

}  // namespace
}  // namespace ringstep
