#include "comm/link.h"

#include <algorithm>
#include <cmath>

namespace ringstep {
namespace {

int64_t serialization_ns(const LinkConfig& link, size_t bytes) {
  if (link.bandwidth_gbps <= 0) return 0;
  return std::llround(static_cast<double>(bytes) * 8.0 /
                      link.bandwidth_gbps);  // bits / (Gb/s) = ns
}

int64_t latency_ns(const LinkConfig& link) {
  return link.latency_us > 0 ? std::llround(link.latency_us * 1e3) : 0;
}

}  // namespace

bool link_enabled(const LinkConfig& link) { return link.bandwidth_gbps > 0 || link.latency_us > 0; }

int64_t link_transfer_ns(const LinkConfig& link, size_t bytes) {
  return latency_ns(link) + serialization_ns(link, bytes);
}

int64_t LinkPacer::schedule(int64_t now_ns, size_t bytes) {
  if (!enabled()) return now_ns;
  const int64_t start = std::max(now_ns, tx_free_ns_);
  tx_free_ns_ = start + serialization_ns(link_, bytes);
  return tx_free_ns_ + latency_ns(link_);
}

}  // namespace ringstep
