// The link-emulation pacing arithmetic (comm/link.h), as pure functions: no clocks read.
#include "comm/link.h"

#include <gtest/gtest.h>

namespace ringstep {
namespace {

LinkConfig link_of(double gbps, double us) {
  LinkConfig link;
  link.bandwidth_gbps = gbps;
  link.latency_us = us;
  return link;
}

TEST(CommLink, OffByDefault) {
  EXPECT_FALSE(link_enabled(LinkConfig{}));
  EXPECT_EQ(link_transfer_ns(LinkConfig{}, 1 << 20), 0);
  LinkPacer pacer{LinkConfig{}};
  EXPECT_EQ(pacer.schedule(12345, 1 << 20), 12345);
}

TEST(CommLink, TransferTimeIsLatencyPlusBitsOverBandwidth) {
  // 10 Gb/s: 1.25 bytes per ns; 1 MB = 8e6 bits -> 800 us, plus 5 us latency.
  EXPECT_EQ(link_transfer_ns(link_of(10, 5), 1'000'000), 805'000);
  EXPECT_EQ(link_transfer_ns(link_of(100, 0), 1'250), 100);
  EXPECT_EQ(link_transfer_ns(link_of(0, 2.5), 1 << 30), 2'500);  // latency only
}

TEST(CommLink, BackToBackMessagesSerialiseButLatencyPipelines) {
  LinkPacer pacer(link_of(8, 10));  // 1 byte per ns, 10 us latency
  // Three 1000-byte messages posted together at t=0: transmissions end at 1, 2, 3 us and
  // each arrives 10 us later; the latency is paid once, not three times.
  EXPECT_EQ(pacer.schedule(0, 1000), 11'000);
  EXPECT_EQ(pacer.schedule(0, 1000), 12'000);
  EXPECT_EQ(pacer.schedule(0, 1000), 13'000);
  // An idle link starts a message when it is posted.
  EXPECT_EQ(pacer.schedule(50'000, 2000), 62'000);
  // Posted while the link is still busy (until 52 us): it waits its turn.
  EXPECT_EQ(pacer.schedule(51'000, 0), 62'000);
}

TEST(CommLink, ReleaseNeverEarlierThanTheIdleLinkTime) {
  LinkPacer pacer(link_of(25, 3));
  int64_t now = 0;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20}) {
    const int64_t release = pacer.schedule(now, bytes);
    EXPECT_GE(release, now + link_transfer_ns(link_of(25, 3), bytes));
    now += 7;
  }
}

}  // namespace
}  // namespace ringstep
