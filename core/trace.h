// Chrome trace (Trace Event Format, "X" complete events) of a window of steps, one file per
// rank: pid = rank, one tid per lane (0 = compute, 1 = comm), timestamps in microseconds on
// steady_clock, which is CLOCK_MONOTONIC and so shared by the ranks of one node. Perfetto and
// chrome://tracing open it. Spans on one lane nest or follow each other; overlapping work
// (communication during backward) sits on its own lane. Not thread-safe: the training
// thread records, including the comm spans the engine reports after the fact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringstep {

enum class Lane : int { compute = 0, comm = 1 };

class TraceRecorder {
 public:
  void span(Lane lane, const std::string& name, int64_t start_ns, int64_t end_ns, int step,
            size_t bytes = 0);
  bool empty() const { return spans_.empty(); }
  // Writes the trace atomically (PATH.tmp, then rename). Throws std::runtime_error.
  void write(const std::string& path, int rank) const;

 private:
  struct Span {
    Lane lane;
    std::string name;
    int64_t start_ns, end_ns;
    int step;
    size_t bytes;
  };
  std::vector<Span> spans_;
};

}  // namespace ringstep
