// Link emulation: makes one machine's fast shared memory behave like a network link of
// `bandwidth_gbps` gigabits per second and `latency_us` one-way latency (0 = off).
//
// Model (one LinkPacer per directed link, i.e. per destination rank): the link carries one
// message at a time at the emulated bandwidth, and the latency is pipelined (it delays a
// message's arrival, not the next message's start). A message of B bytes posted at time t:
//   start   = max(t, end of the previous message's transmission)
//   tx_end  = start + B * 8 / (bandwidth_gbps * 1e9)
//   release = tx_end + latency_us * 1e-6
// The sender hands the message to the transport at `release` (so the receiver cannot see
// it earlier) and the next message may start transmitting at tx_end. A single message on
// an idle link therefore completes no earlier than latency + B*8/bw after it was posted.
// The real transfer time is added on top, which is negligible when the emulated link is
// much slower than shared memory (the use case: 1-100 Gb/s on one node).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/config.h"  // LinkConfig

namespace ringstep {

bool link_enabled(const LinkConfig& link);
// latency + bytes*8/bw of one message on an idle link, in nanoseconds (0 when off).
int64_t link_transfer_ns(const LinkConfig& link, size_t bytes);

class LinkPacer {
 public:
  LinkPacer() = default;
  explicit LinkPacer(const LinkConfig& link) : link_(link) {}
  // Books a message of `bytes` posted at now_ns; returns its release time (ns, same clock).
  int64_t schedule(int64_t now_ns, size_t bytes);
  bool enabled() const { return link_enabled(link_); }

 private:
  LinkConfig link_;
  int64_t tx_free_ns_ = 0;  // when the link has finished transmitting what was booked
};

}  // namespace ringstep
