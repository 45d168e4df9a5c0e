// A DeviceClock for tests: each mark is stamped with the time (ms) the test has set in
// now_ms; waits are counted; clear() forgets the marks.
#pragma once

#include <vector>

#include "core/device_clock.h"

namespace ringstep::testing {

struct FakeDeviceClock : DeviceClock {
  std::vector<double>* at_ms;
  double now_ms = 0;
  std::vector<int>* waits;
  FakeDeviceClock(std::vector<double>* marks, std::vector<int>* w) : at_ms(marks), waits(w) {}
  int mark() override {
    at_ms->push_back(now_ms);
    return int(at_ms->size()) - 1;
  }
  void wait(int m) override { waits->push_back(m); }
  double elapsed_ms(int from, int to) override { return (*at_ms)[to] - (*at_ms)[from]; }
  void clear() override { at_ms->clear(); }
};

}  // namespace ringstep::testing
