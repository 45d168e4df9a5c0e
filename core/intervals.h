// Time intervals on one steady clock, in nanoseconds: the union of a set of spans and the
// overlap of two such unions. How the profiler relates communication in flight to the
// training thread's waits (train/grad_sync.h: comm_exposed never exceeds comm).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ringstep {

struct Interval {
  int64_t begin_ns = 0, end_ns = 0;  // [begin, end); empty when end <= begin
};

// SPANS merged into disjoint, sorted, non-empty intervals.
inline std::vector<Interval> union_of(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Interval& a, const Interval& b) { return a.begin_ns < b.begin_ns; });
  std::vector<Interval> out;
  for (const Interval& s : spans) {
    if (s.end_ns <= s.begin_ns) continue;
    if (!out.empty() && s.begin_ns <= out.back().end_ns)
      out.back().end_ns = std::max(out.back().end_ns, s.end_ns);
    else
      out.push_back(s);
  }
  return out;
}

// The length of the union of SPANS.
inline int64_t covered_ns(const std::vector<Interval>& spans) {
  int64_t total = 0;
  for (const Interval& s : union_of(spans)) total += s.end_ns - s.begin_ns;
  return total;
}

// The length of the time covered by both A and B (each any set of spans).
inline int64_t overlap_ns(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  const std::vector<Interval> x = union_of(a), y = union_of(b);
  int64_t total = 0;
  for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
    total += std::max<int64_t>(
        0, std::min(x[i].end_ns, y[j].end_ns) - std::max(x[i].begin_ns, y[j].begin_ns));
    (x[i].end_ns < y[j].end_ns ? i : j)++;
  }
  return total;
}

}  // namespace ringstep
