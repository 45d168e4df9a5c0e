#include "comm/communicator.h"

#include <algorithm>

#include "comm/backoff.h"

namespace ringstep {

void CommRequest::wait() {
  Backoff backoff;
  while (!test()) backoff.pause();
}

Shard shard_of(size_t count, int nranks, int rank) {
  const size_t n = static_cast<size_t>(nranks), r = static_cast<size_t>(rank);
  const size_t base = count / n, extra = count % n;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

}  // namespace ringstep
