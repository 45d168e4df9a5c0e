// merge_traces (train/trace_merge.h): ranks whose clocks differ land on one timeline, shifted
// by their clock sync; a trace without its sync, or a run without traces, is refused naming
// the file.
#include "train/trace_merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/trace.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

fs::path Dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("ringstep_merge_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "trace");
  return d;
}

// Rank R's trace of one span that began at TRUE_NS on rank 0's clock, on a clock running
// OFFSET_NS ahead of rank 0's.
void WriteRank(const fs::path& dir, int rank, int64_t offset_ns, int64_t true_ns) {
  TraceRecorder t;
  t.set_clock_sync(1'000'000'000 + offset_ns);  // the shared moment, on this rank's clock
  t.span(Lane::compute, "forward", true_ns + offset_ns, true_ns + offset_ns + 2000, 5);
  t.write((dir / "trace" / ("rank-" + std::to_string(rank) + ".json")).string(), rank);
}

TEST(TraceMerge, RanksLandOnRankZerosClock) {
  const fs::path dir = Dir("ok");
  WriteRank(dir, 0, 0, 1'000'500'000);
  WriteRank(dir, 1, 7'000'000'000, 1'000'500'000);  // a node whose clock is 7 s ahead
  WriteRank(dir, 2, -3'000'000, 1'000'500'000);
  ASSERT_EQ(merge_traces(dir.string(), (dir / "all.json").string()), 3);
  const auto doc = nlohmann::json::parse(std::ifstream(dir / "all.json"));
  int spans = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans;
    EXPECT_NEAR(e["ts"].get<double>(), 1'000'500.0, 1e-3) << "rank " << e["pid"];
    EXPECT_NEAR(e["dur"].get<double>(), 2.0, 1e-9);
  }
  EXPECT_EQ(spans, 3);
  fs::remove_all(dir);
}

TEST(TraceMerge, RefusesMissingTracesAndTracesWithoutTheirSync) {
  const fs::path dir = Dir("bad");
  EXPECT_THROW(merge_traces(dir.string(), (dir / "all.json").string()), InputError);
  WriteRank(dir, 0, 0, 5);
  std::ofstream(dir / "trace" / "rank-1.json") << R"({"traceEvents": []})";
  try {
    merge_traces(dir.string(), (dir / "all.json").string());
    FAIL() << "merged a trace without its clock sync";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1.json' lacks otherData.clock_sync_ns"),
              std::string::npos)
        << e.what();
  }
  std::ofstream(dir / "trace" / "rank-1.json") << "not json";
  EXPECT_THROW(merge_traces(dir.string(), (dir / "all.json").string()), InputError);
  EXPECT_FALSE(fs::exists(dir / "all.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringstep
