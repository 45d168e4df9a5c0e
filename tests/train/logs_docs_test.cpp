// docs/logs.md's tables of steps.jsonl and summary.json list exactly the fields that the
// schemas write, in the order they are written: nothing written goes undocumented, nothing
// documented is gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "train/run_summary.h"
#include "train/step_record.h"

namespace ringstep {
namespace {

// The backquoted names in the first column of the first table after HEADING, in order; a
// `P` in a name stands for each phase of time_ms but `step`.
std::vector<std::string> DocumentedFields(const std::string& heading) {
  std::ifstream in(std::string(RINGSTEP_SOURCE_DIR) + "/docs/logs.md");
  std::string line;
  while (std::getline(in, line) && line != heading) {
  }
  EXPECT_EQ(line, heading) << "docs/logs.md has no section " << heading;
  while (std::getline(in, line) && line.rfind("| field |", 0) != 0) {
  }
  std::getline(in, line);  // |---|
  std::vector<std::string> names;
  const std::regex name("`([a-z0-9_.P]+)`");
  while (std::getline(in, line) && line.rfind("| ", 0) == 0) {
    const std::string first = line.substr(2, line.find(" |", 2) - 2);
    for (std::sregex_iterator m(first.begin(), first.end(), name), end; m != end; ++m) {
      const std::string n = (*m)[1];
      const size_t p = n.find(".P.");
      if (p == std::string::npos) {
        names.push_back(n);
        continue;
      }
      for (size_t f = 1; f < kPhaseFields.size(); ++f)
        names.push_back(n.substr(0, p + 1) + kPhaseFields[f].name + n.substr(p + 2));
    }
  }
  return names;
}

// The written order groups ranks.phase_ms by phase (data.min, data.median, ...); the table
// by statistic. Both are compared as sets, then the rest in order.
std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(LogsDocs, StepsTableListsExactlyTheRecordFields) {
  const std::vector<std::string> documented = DocumentedFields("## steps.jsonl");
  const std::vector<std::string> written = step_record_field_names();
  EXPECT_EQ(Sorted(documented), Sorted(written));
  const auto no_phase_ms = [](std::vector<std::string> v) {
    std::erase_if(v, [](const std::string& s) { return s.rfind("ranks.phase_ms.", 0) == 0; });
    return v;
  };
  EXPECT_EQ(no_phase_ms(documented), no_phase_ms(written)) << "not in the written order";
}

TEST(LogsDocs, SummaryTableListsExactlyTheSummaryFields) {
  EXPECT_EQ(DocumentedFields("## summary.json"), summary_field_names());
}

}  // namespace
}  // namespace ringstep
