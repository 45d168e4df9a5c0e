// `ringstep report` on damaged run files, the way a fuzzer meets it: a real run's
// summary.json and steps.jsonl, mutated by byte flips, truncations, deleted fields, values
// of the wrong type, huge numbers and reordered lines. Every mutation must end in a report
// (exit 0) or in an InputError that names the damaged file (exit 2): never another
// exception (exit 1), a crash or a hang. Most mutations run in process through analyze() and
// both renderings; a sample goes through the binary to check the exit code itself.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/report.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  if (at < text.size()) out.push_back(text.substr(at));
  return out;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// A real run into a fresh directory NAME: 12 steps with evaluations, op timings and a
// trace; one record is given a 1-bit Adam stage so that the enum fields are there to damage.
fs::path RealRun(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("ringstep_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  Config cfg = testing::SmallRun(d.string(), 12);
  cfg.train.eval_every = 5;
  cfg.profile.op_every = 4;
  train(cfg, nullptr);
  std::vector<std::string> lines = Lines(ReadText(d / "steps.jsonl"));
  json rec = json::parse(lines[7]);
  rec["stage"] = "compressed";
  rec["compression_error"] = 0.5;
  lines[7] = rec.dump();
  WriteText(d / "steps.jsonl", Join(lines));
  return d;
}

// The JSON pointers of every value under J (objects' members and arrays' elements).
void Pointers(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  if (j.is_object())
    for (const auto& [key, value] : j.items()) {
      out.push_back(at / key);
      Pointers(value, at / key, out);
    }
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(at / i);
      Pointers(j[i], at / i, out);
    }
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  // One JSON-level change to J: a value deleted, replaced by another type, or by a huge,
  // negative or fractional number. Returns what it did, for the failure message.
  std::string change(json& j) {
    std::vector<json::json_pointer> ptrs;
    Pointers(j, json::json_pointer(), ptrs);
    if (ptrs.empty()) return "nothing to change";
    const json::json_pointer p = ptrs[pick(ptrs.size())];
    static const std::vector<json> kValues = {"x",
                                              "",
                                              true,
                                              false,
                                              nullptr,
                                              json::array(),
                                              json::object(),
                                              0,
                                              -1,
                                              0.5,
                                              -0.001,
                                              1e308,
                                              -1e308,
                                              1e19,
                                              2147483648.0,
                                              -2147483649.0,
                                              18446744073709551615u,
                                              4e-320,
                                              1048576,
                                              1048577,
                                              65536,
                                              3};
    if (pick(3) == 0) {
      json& parent = j[p.parent_pointer()];
      if (parent.is_object())
        parent.erase(p.back());
      else
        parent.erase(size_t(std::stoul(p.back())));
      return "deleted " + p.to_string();
    }
    const json v = kValues[pick(kValues.size())];
    j[p] = v;
    return "set " + p.to_string() + " = " + v.dump();
  }

  // One byte-level change to TEXT: a flip, a truncation, a duplicated or dropped span.
  std::string damage(std::string& text) {
    if (text.empty()) return "empty";
    static const std::string kBytes = std::string("09-+.eE\"{}[],: nN\xff", 19) + '\0';
    const size_t at = pick(text.size());
    switch (pick(5)) {
      case 0:
        text[at] = kBytes[pick(kBytes.size())];
        return "byte " + std::to_string(at) + " changed";
      case 1:
        text.resize(at);
        return "truncated at " + std::to_string(at);
      case 2:
        text.insert(at, text.substr(at, pick(40) + 1));
        return "span duplicated at " + std::to_string(at);
      case 3:
        text.erase(at, pick(40) + 1);
        return "span dropped at " + std::to_string(at);
      default:
        text.insert(at, pick(2) ? "NaN" : "1e400");
        return "NaN/1e400 inserted at " + std::to_string(at);
    }
  }

 private:
  std::mt19937_64 rng_;
};

// What `ringstep report DIR` does, in process: "" for a report, the InputError's message
// otherwise. Any other exception fails the test.
std::string Report(const fs::path& dir, const std::string& what) {
  try {
    const ReportData r = analyze(dir.string(), {5.0, 1, 1e10});
    EXPECT_FALSE(report_text(r).empty());
    EXPECT_NO_THROW(json::parse(report_json(r))) << what;
    return "";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()), "") << what;
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not an InputError (exit 1): " << e.what();
    return "";
  }
}

// The binary's exit code and output for `ringstep report DIR`.
std::pair<int, std::string> ReportCli(const fs::path& dir) {
  const std::string cmd = std::string(RINGSTEP_BINARY) + " report " + dir.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(ReportFuzz, DamagedRunFilesExitZeroOrTwoNamingTheFile) {
  const fs::path run = RealRun("fuzz_run");
  const std::string summary = ReadText(run / "summary.json"), steps = ReadText(run / "steps.jsonl");
  ASSERT_EQ(Report(run, "the real run"), "");
  const fs::path dir = fs::temp_directory_path() / ("ringstep_fuzz_" + std::to_string(getpid()));
  Mutator m(20261201);
  int errors = 0, reports = 0, cli_threads = 0;
  for (int i = 0; i < 1200; ++i) {
    fs::remove_all(dir);
    fs::copy(run, dir, fs::copy_options::recursive);
    const bool in_summary = m.pick(2) == 0;
    const std::string file = in_summary ? "summary.json" : "steps.jsonl";
    std::string what;
    if (in_summary) {
      std::string text = summary;
      if (m.pick(2) == 0) {
        json j = json::parse(text);
        what = m.change(j);
        text = j.dump(2);
      } else {
        what = m.damage(text);
      }
      WriteText(dir / file, text);
    } else {
      std::vector<std::string> lines = Lines(steps);
      const size_t k = m.pick(lines.size());
      switch (m.pick(4)) {
        case 0: {
          json j = json::parse(lines[k]);
          what = "line " + std::to_string(k + 1) + ": " + m.change(j);
          lines[k] = j.dump();
          break;
        }
        case 1:
          what = "line " + std::to_string(k + 1) + ": " + m.damage(lines[k]);
          break;
        case 2: {
          std::swap(lines[k], lines[m.pick(lines.size())]);
          const std::string again = lines[k];
          lines.insert(lines.begin() + long(m.pick(lines.size())), again);
          what = "lines swapped and one repeated";
          break;
        }
        default: {
          std::string text = Join(lines);
          what = m.damage(text);
          lines = Lines(text);
        }
      }
      WriteText(dir / file, Join(lines));
    }
    what = file + ", " + what;
    const std::string error = Report(dir, what);
    if (error.empty()) {
      ++reports;
    } else {
      ++errors;
      // FUZZ_SHOW=1 prints every mutation with its message, to read them.
      if (std::getenv("FUZZ_SHOW")) std::printf("%s\n  -> %s\n", what.c_str(), error.c_str());
      EXPECT_NE(error.find(dir.string() + "/" + file), std::string::npos) << what << ": " << error;
    }
    // A sample through the binary: the exit code itself, and the machine probe on the
    // file's thread count.
    const bool threads = what.find("/threads") != std::string::npos;
    if (i % 200 == 0 || (threads && cli_threads++ < 4)) {
      const auto [code, out] = ReportCli(dir);
      EXPECT_EQ(code, error.empty() ? 0 : 2) << what << "\n" << out;
      if (code == 2)
        EXPECT_NE(out.find("ringstep: error: " + dir.string()), std::string::npos) << out;
    }
  }
  std::printf("fuzz: %d reports, %d input errors\n", reports, errors);
  // The mutations reach both outcomes.
  EXPECT_GT(errors, 300);
  EXPECT_GT(reports, 100);
  fs::remove_all(dir);
  fs::remove_all(run);
}

// What the fuzzer found: each was an internal error (exit 1) or a silently wrong report.
TEST(ReportFuzz, FoundInputsExitWithCodeTwo) {
  const fs::path run = RealRun("found_run");
  const fs::path dir = fs::temp_directory_path() / ("ringstep_found_" + std::to_string(getpid()));
  const auto expect = [&](const std::string& file, const std::string& text,
                          const std::string& fragment) {
    fs::remove_all(dir);
    fs::copy(run, dir, fs::copy_options::recursive);
    WriteText(dir / file, text);
    const auto [code, out] = ReportCli(dir);
    EXPECT_EQ(code, 2) << file << ": " << text.substr(0, 200) << "\n" << out;
    EXPECT_NE(out.find(dir.string() + "/" + file), std::string::npos) << out;
    EXPECT_NE(out.find(fragment), std::string::npos) << fragment << "\n" << out;
  };
  const std::string summary = ReadText(run / "summary.json");
  const auto set = [&](const char* key, const std::string& value) {
    json j = json::parse(summary);
    std::string text = j.dump(2);
    const std::string from = "\"" + std::string(key) + "\": " + j[key].dump();
    text.replace(text.find(from), from.size(), "\"" + std::string(key) + "\": " + value);
    return text;
  };
  // Were exit 1: a vector of -3 or 10^12 ranks, 10^9 OpenMP threads, and a number that
  // overflows a double (nlohmann's out_of_range, which the parse_error handler missed).
  expect("summary.json", set("world", "-3"), "field 'world' must be an integer in [1, 1048576]");
  expect("summary.json", set("world", "1e12"), "field 'world' must be an integer");
  expect("summary.json", set("threads", "1000000000"), "field 'threads' must be an integer");
  expect("summary.json", set("mfu", "1e400"), "invalid JSON");
  std::vector<std::string> lines = Lines(ReadText(run / "steps.jsonl"));
  lines[2] = std::regex_replace(lines[2], std::regex("\"loss\":[^,]*"), "\"loss\":1e400");
  expect("steps.jsonl", Join(lines), "steps.jsonl:3: invalid step record");
  // Were read as something else: a negative time, a string for a number, a huge step.
  lines = Lines(ReadText(run / "steps.jsonl"));
  json rec = json::parse(lines[4]);
  rec["time_ms"]["backward"] = -50.0;
  lines[4] = rec.dump();
  expect("steps.jsonl", Join(lines), "steps.jsonl:5: field 'time_ms.backward' must be >= 0");
  rec = json::parse(
      ReadText(run / "steps.jsonl").substr(0, ReadText(run / "steps.jsonl").find('\n')));
  rec["step"] = 1e300;
  expect("steps.jsonl", rec.dump() + "\n" + ReadText(run / "steps.jsonl"),
         "steps.jsonl:1: field 'step' must be an integer");
  expect("summary.json", set("peak_gflops", "\"fast\""), "field 'peak_gflops' must be a number");
  expect("summary.json", set("final_loss", "-1"), "field 'final_loss' must be >= 0");
  fs::remove_all(dir);
  fs::remove_all(run);
}

}  // namespace
}  // namespace ringstep
