// Chrome trace (Trace Event Format, "X" complete events) of a window of steps, one file per
// rank: pid = rank, one tid per lane (0 = compute, 1 = comm), timestamps in microseconds on
// steady_clock, which is CLOCK_MONOTONIC and so shared by the ranks of one node. Perfetto and
// chrome://tracing open it. Spans on one lane nest or follow each other; overlapping work
// (communication during backward) sits on its own lane. Not thread-safe: the training
// thread records, including the comm spans the engine reports after the fact.
//
// Each file also carries `otherData.clock_sync_ns`: this rank's clock at a moment all ranks
// shared (the end of a collective), from which merge_traces (train/trace_merge.h) aligns the
// ranks' clocks, which differ across nodes.
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
  // This rank's steady_clock at a moment every rank shares (0: none taken).
  void set_clock_sync(int64_t ns) { clock_sync_ns_ = ns; }
  // Writes the trace whole or not at all (core/files.h). Throws SystemFault.
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
  int64_t clock_sync_ns_ = 0;
};

}  // namespace ringstep
