// Work sharing inside an OpenMP team without opening a region: each thread of the team
// that calls team_share takes one contiguous share of a range. Outside any parallel region
// the caller is a team of one and gets the whole range, so one function body serves both.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace ringstep::cpu {

struct Span {
  size_t begin, end;
  size_t size() const { return end - begin; }
};

// The calling thread's share of [0, n) in a static split over its team, cut at multiples of
// GRAIN (except at n). Shares are contiguous, in thread order, and cover [0, n) once.
inline Span team_share(size_t n, size_t grain = 1) {
  const size_t t = size_t(omp_get_thread_num()), team = size_t(omp_get_num_threads());
  const size_t units = (n + grain - 1) / grain;
  return {std::min(n, units * t / team * grain), std::min(n, units * (t + 1) / team * grain)};
}

}  // namespace ringstep::cpu
