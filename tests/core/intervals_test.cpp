// Interval unions and overlaps (core/intervals.h) against a brute-force count over a grid
// of nanoseconds, on random spans.
#include "core/intervals.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ringstep {
namespace {

// Whether T lies in any of SPANS.
bool Covered(const std::vector<Interval>& spans, int64_t t) {
  for (const Interval& s : spans)
    if (s.begin_ns <= t && t < s.end_ns) return true;
  return false;
}

TEST(Intervals, UnionAndOverlapMatchACountOfEveryNanosecond) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int64_t> at(0, 200), len(-5, 40);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Interval> a, b;
    for (int i = 0; i < trial % 7; ++i) {
      const int64_t s = at(gen);
      a.push_back({s, s + len(gen)});
    }
    for (int i = 0; i < trial % 5; ++i) {
      const int64_t s = at(gen);
      b.push_back({s, s + len(gen)});
    }
    int64_t in_a = 0, in_both = 0;
    for (int64_t t = 0; t < 260; ++t) {
      in_a += Covered(a, t);
      in_both += Covered(a, t) && Covered(b, t);
    }
    EXPECT_EQ(covered_ns(a), in_a) << trial;
    EXPECT_EQ(overlap_ns(a, b), in_both) << trial;
    EXPECT_EQ(overlap_ns(b, a), in_both) << trial;
    EXPECT_LE(overlap_ns(a, b), covered_ns(a));
    const std::vector<Interval> u = union_of(a);
    for (size_t i = 1; i < u.size(); ++i) EXPECT_LT(u[i - 1].end_ns, u[i].begin_ns);
  }
}

}  // namespace
}  // namespace ringstep
