// `ringstep trace RUN_DIR`: the ranks' Chrome traces (RUN_DIR/trace/rank-R.json, core/trace.h)
// merged into one timeline that Perfetto (ui.perfetto.dev) or chrome://tracing opens, each
// rank a process, their clocks aligned on the moment every rank shared before the traced
// window (otherData.clock_sync_ns): rank R's events move by rank 0's sync minus its own.
#pragma once

#include <string>

namespace ringstep {

// Reads every RUN_DIR/trace/rank-R.json (R = 0, 1, ... without gaps), writes the merged
// trace to OUTPUT whole (core/files.h) and returns the number of ranks merged. Throws
// InputError naming the file when one is missing, is not a trace ringstep wrote, or lacks
// its clock sync; SystemFault when OUTPUT cannot be written.
int merge_traces(const std::string& run_dir, const std::string& output);

}  // namespace ringstep
