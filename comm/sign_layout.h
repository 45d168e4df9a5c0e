// Where a sign-compressed AllReduce's values lie (comm/sign_allreduce.h's layout, the one
// home of its message format, shared by the CPU code and the device one,
// comm/device_sign_allreduce.h). COUNT elements over N ranks are padded to N chunks of
// `chunk` elements (a multiple of 8); message j (worker to server j, or server j to all) is
// [fp32 scale of each segment that chunk j touches, in segment order | chunk / 8 packed
// bytes]; every message has room for the most scales any chunk needs (unused slots 0) and
// is rounded up to whole 16-bit words (the transport moves 16-bit words; the pad byte is 0).
// A segment's worker scale sums its elements in runs of kScaleRun from its first.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "comm/communicator.h"  // Shard

namespace ringstep {

// Elements per run of a scale's sum (comm/sign_allreduce.h): 64 KiB of floats.
constexpr size_t kScaleRun = 16384;

// Elements per server chunk for COUNT elements over N ranks: round_up(count, 8 N) / N.
inline size_t sign_chunk_elems(size_t count, int nranks) {
  const size_t quantum = 8 * size_t(nranks);
  return (count + quantum - 1) / quantum * 8;
}

struct SignLayout {
  size_t count = 0;
  int nranks = 1;
  std::vector<size_t> ends;           // segment ends, the last == count
  size_t chunk = 0;                   // elements per server chunk, a multiple of 8
  std::vector<size_t> first_segment;  // per chunk: the first segment it touches
  size_t scale_bytes = 0;             // of one message's scale slots
  size_t block_bytes = 0;             // one message
  struct Run {
    size_t begin, end;
  };
  std::vector<Run> runs;             // every segment's scale runs, in order
  std::vector<size_t> segment_runs;  // segment k's runs: [segment_runs[k], segment_runs[k + 1])

  // Throws std::invalid_argument unless SEGMENT_ENDS ({} = one segment) ascend to N.
  SignLayout(size_t n, const std::vector<size_t>& segment_ends, int ranks)
      : count(n), nranks(ranks), ends(segment_ends), chunk(sign_chunk_elems(n, ranks)) {
    if (ends.empty()) ends.push_back(n);
    if (ends.back() != n || !std::is_sorted(ends.begin(), ends.end()))
      throw std::invalid_argument("sign_allreduce: segment ends must ascend to the count");
    size_t most = 0;
    for (int j = 0; j < nranks; ++j) {
      const Shard c = real(j);
      // Segments k with ends[k] > c.offset and start < c.offset + c.count, non-empty.
      const size_t first =
          size_t(std::upper_bound(ends.begin(), ends.end(), c.offset) - ends.begin());
      const size_t last =
          c.count == 0 ? first
                       : size_t(std::lower_bound(ends.begin(), ends.end(), c.offset + c.count) -
                                ends.begin()) +
                             1;
      first_segment.push_back(first);
      most = std::max(most, last - first);
    }
    scale_bytes = most * sizeof(float);
    block_bytes = (scale_bytes + chunk / 8 + 1) / 2 * 2;
    segment_runs.push_back(0);
    for (size_t k = 0, start = 0; k < ends.size(); start = ends[k++]) {
      for (size_t b = start; b < ends[k]; b += kScaleRun)
        runs.push_back({b, std::min(ends[k], b + kScaleRun)});
      segment_runs.push_back(runs.size());
    }
  }
  // The real (unpadded) elements of chunk j.
  Shard real(int j) const {
    const size_t begin = std::min(count, size_t(j) * chunk);
    return {begin, std::min(count, begin + chunk) - begin};
  }
  size_t segment_start(size_t k) const { return k == 0 ? 0 : ends[k - 1]; }
  // The byte offset of segment K's scale in a message of chunk J (K touches chunk J).
  size_t scale_offset(int j, size_t k) const {
    return (k - first_segment[size_t(j)]) * sizeof(float);
  }
  // Calls f(k, begin, end) for every non-empty part of segment k inside [begin, end).
  template <class F>
  void for_parts(size_t begin, size_t end, F&& f) const {
    size_t k = size_t(std::upper_bound(ends.begin(), ends.end(), begin) - ends.begin());
    for (size_t start = k == 0 ? 0 : ends[k - 1]; k < ends.size() && start < end;
         start = ends[k++]) {
      const size_t b = std::max(begin, start), e = std::min(end, ends[k]);
      if (b < e) f(k, b, e);
    }
  }
};

}  // namespace ringstep
