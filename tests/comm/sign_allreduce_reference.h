// A single-process simulation of comm/sign_allreduce.h's math for N ranks, written from the
// header's formulas with plain loops (no messages, no packing): the multi-rank test holds the
// real transport to it bit for bit. It shares only sign_scale, whose summation order the
// header fixes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "comm/sign_allreduce.h"

namespace ringstep::testing {

struct SignSim {
  // Per simulated rank: the input (replaced by the output), e_w and e_s (count each).
  std::vector<std::vector<float>> x, worker_error, server_error;
  std::vector<size_t> starts;  // of the segments, then count

  SignSim(int nranks, size_t count, const std::vector<size_t>& segment_ends = {})
      : x(size_t(nranks), std::vector<float>(count)), worker_error(x), server_error(x) {
    starts = {0};
    for (size_t e : segment_ends) starts.push_back(e);
    if (segment_ends.empty()) starts.push_back(count);
  }
  size_t segment_of(size_t i) const {
    return size_t(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin()) - 1;
  }
  // The scale of Z's elements [b, e) of each segment, by segment.
  std::vector<float> scales(const float* z, size_t b, size_t e, OneBitScale kind) const {
    std::vector<float> out(starts.size() - 1, 0.0f);
    for (size_t k = 0; k + 1 < starts.size(); ++k) {
      const size_t lo = std::max(b, starts[k]), hi = std::min(e, starts[k + 1]);
      if (lo < hi) out[k] = sign_scale(z + lo - b, hi - lo, kind);
    }
    return out;
  }

  int ranks() const { return int(x.size()); }
  size_t count() const { return x[0].size(); }

  void step(OneBitScale kind) {
    const int n = ranks();
    const size_t count = this->count();
    const size_t quantum = 8 * size_t(n);
    const size_t chunk = (count + quantum - 1) / quantum * quantum / size_t(n);
    std::vector<std::vector<float>> worker_scale(static_cast<size_t>(n));
    std::vector<std::vector<float>> z(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      z[r].resize(count);
      for (size_t i = 0; i < count; ++i) z[r][i] = x[r][i] + worker_error[r][i];
      worker_scale[r] = scales(z[r].data(), 0, count, kind);
      for (size_t i = 0; i < count; ++i) {
        const float s = worker_scale[r][segment_of(i)];
        worker_error[r][i] = z[r][i] - (z[r][i] < 0 ? -s : s);
      }
    }
    std::vector<float> out(count);
    for (int j = 0; j < n; ++j) {
      const size_t begin = std::min(count, size_t(j) * chunk);
      const size_t end = std::min(count, begin + chunk);
      std::vector<float> zs(end - begin);
      for (size_t i = begin; i < end; ++i) {
        float acc = 0.0f;
        for (int q = 0; q < n; ++q) {
          const float s = worker_scale[q][segment_of(i)];
          acc += z[q][i] < 0 ? -s : s;
        }
        zs[i - begin] = acc / float(n) + server_error[j][i];
      }
      const std::vector<float> server_scale = scales(zs.data(), begin, end, kind);
      for (size_t i = begin; i < end; ++i) {
        const float s = server_scale[segment_of(i)];
        const float q = zs[i - begin] < 0 ? -s : s;
        out[i] = q;
        server_error[j][i] = zs[i - begin] - q;
      }
    }
    for (int r = 0; r < n; ++r) x[r] = out;
  }
};

// A smooth-ish, rank- and call-dependent input with mixed magnitudes and exact zeros.
inline float sign_input(int rank, size_t i, int call) {
  if ((i * 7 + size_t(call)) % 23 == 0) return 0.0f;
  const unsigned h = unsigned(i * 2654435761u) ^ unsigned(rank * 40503 + call * 977);
  const float mag = float((h >> 8) % 1000) * 1e-3f * (i % 5 == 0 ? 10.0f : 1.0f);
  return (h & 1u) ? -mag : mag;
}

}  // namespace ringstep::testing
