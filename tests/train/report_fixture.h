// The recorded runs that the report's tests read (tests/train/fixtures/report_run/) and
// helpers to change a copy of one.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/report.h"

namespace ringstep::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Two recorded runs with numbers chosen by hand (tests/train/fixtures/report_run/):
//  healthy   1 rank, 20 steps. Steps 1-2 (warm-up, 300 ms) are excluded; steps 3..20 take
//            100, 101, ..., 117 ms, split data 1% / forward 30% / backward 60% /
//            optimizer 8% / other 1%. 2048 tokens and 5.425 model GFLOP per step, peak
//            100 GFLOP/s, activation peak 50 MiB, final val loss 2.6 over a floor of 1.5.
//  straggler 4 ranks, 10 steps, fp16, full recompute. Step 1 is warm-up; steps 2..10 take
//            200 ms: data 2, forward 40, backward 60 (recompute 15), optimizer 8, comm 110
//            of which 88 exposed, other 2. Rank 3 is slowest in 7 of the 9 steady steps,
//            rank 1 in 2; max/median = 200/180. Step 5 was skipped. 8192 tokens and
//            6 model GFLOP per step, peak 100.
inline const fs::path kFixtures = fs::path(RINGSTEP_SOURCE_DIR) / "tests/train/fixtures/report_run";
inline constexpr double kMiB = 1048576.0;
inline constexpr double kEps = 1e-9;

// A machine with enough RAM that the memory rule stays quiet, and a bandwidth that puts
// the balance at 100 / 5 = 20 FLOP/byte.
inline MachineInfo BigMachine() { return {5.0, 1, 64.0 * 1024 * kMiB}; }

inline fs::path Scratch(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("ringstep_report_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

// A copy of a fixture that a test may change.
inline fs::path CopyFixture(const std::string& fixture, const std::string& name) {
  fs::path dst = Scratch(name);
  fs::copy(kFixtures / fixture, dst, fs::copy_options::recursive);
  return dst;
}

inline std::vector<json> ReadSteps(const fs::path& dir) {
  std::ifstream in(dir / "steps.jsonl");
  std::vector<json> recs;
  for (std::string line; std::getline(in, line);) recs.push_back(json::parse(line));
  return recs;
}

inline void WriteSteps(const fs::path& dir, const std::vector<json>& recs) {
  std::ofstream out(dir / "steps.jsonl", std::ios::trunc);
  for (const json& r : recs) out << r.dump() << '\n';
}

inline void AppendRaw(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << text;
}

inline bool Fired(const ReportData& r, const std::string& id) {
  const std::vector<std::string> ids = r.fired();
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace ringstep::testing
