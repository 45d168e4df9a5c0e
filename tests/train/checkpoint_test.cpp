// Checkpoints on one rank: a resumed run is bit-identical to one that never stopped; a
// damaged checkpoint is never loaded; a run directory holding an earlier run is refused;
// a checkpoint of another model is refused naming what differs.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "train/checkpoint_run.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;
using ringstep::testing::SmallRun;

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ringstep_ckpt_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string ErrorOf(const Config& cfg) {
  try {
    train(cfg, nullptr);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no InputError";
}

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

int CountLines(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

void ExpectResumeIsExact(const Config& base, const std::string& name) {
  const fs::path dir = FreshDir(name);
  const auto r = ringstep::testing::RunStraightAndResumed(base, dir, nullptr);
  ringstep::testing::ExpectResumedMatchesStraight(r);
  // steps.jsonl was appended to: steps 1-10 from the first run, 11-20 from the resumed one.
  EXPECT_EQ(CountLines(dir / "split" / "steps.jsonl"), 20);
  // The summary covers the whole run: what counts steps agrees with the straight run.
  const nlohmann::json straight = ReadJson(dir / "straight" / "summary.json"),
                       split = ReadJson(dir / "split" / "summary.json");
  EXPECT_EQ(split["resumed_at_step"], 10);
  EXPECT_EQ(straight["resumed_at_step"], 0);
  for (const char* key : {"steps", "skipped_steps", "optimizer_steps", "warmup_steps_excluded"})
    EXPECT_EQ(split[key], straight[key]) << key;
}

TEST(Checkpoint, ResumeIsBitExactFp32) { ExpectResumeIsExact(SmallRun("", 20), "fp32"); }

TEST(Checkpoint, ResumeIsBitExactFp16DynamicScaling) {
  const Config cfg = ringstep::testing::Fp16Dynamic(SmallRun("", 20));
  ExpectResumeIsExact(cfg, "fp16");
}

// Saves at steps 4, 8, 12 (and keeps 2): the commit leaves no .tmp, older ones go.
TEST(Checkpoint, KeepsTheNewestAndNothingHalfWritten) {
  const fs::path dir = FreshDir("keep");
  Config cfg = SmallRun(dir.string(), 13);
  cfg.checkpoint.every = 4;
  const TrainOutcome r = train(cfg, nullptr);
  EXPECT_EQ(r.last_checkpoint, (dir / "checkpoints" / "step-13").string());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-12", "step-13"}));
}

void Damage(const fs::path& file, bool truncate) {
  const auto size = fs::file_size(file);
  if (truncate) {
    fs::resize_file(file, size - 4);
    return;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(size / 2));
  const char c = char(f.get() ^ 0x10);
  f.seekp(std::streamoff(size / 2));
  f.put(c);
}

TEST(Checkpoint, TruncatedOrBitFlippedIsNeverLoaded) {
  const fs::path dir = FreshDir("damaged");
  Config cfg = SmallRun(dir.string(), 15);
  cfg.checkpoint.every = 5;
  cfg.checkpoint.keep = 3;
  const TrainOutcome straight = train(cfg, nullptr);
  const fs::path ck = dir / "checkpoints";
  Damage(ck / "step-15" / "params.bin", /*truncate=*/true);
  EXPECT_EQ(find_resume_checkpoint(cfg, false), (ck / "step-10").string());
  Damage(ck / "step-10" / "adam_m.bin", /*truncate=*/false);
  EXPECT_EQ(find_resume_checkpoint(cfg, false), (ck / "step-5").string());

  Config named = cfg;
  named.checkpoint.resume = (ck / "step-15").string();
  EXPECT_NE(ErrorOf(named).find("params.bin has "), std::string::npos) << ErrorOf(named);
  EXPECT_NE(ErrorOf(named).find("(truncated)"), std::string::npos);
  named.checkpoint.resume = (ck / "step-10").string();
  EXPECT_NE(ErrorOf(named).find("adam_m.bin does not match its checksum"), std::string::npos);
  fs::remove(ck / "step-5" / "manifest.json");
  EXPECT_EQ(find_resume_checkpoint(cfg, false), "");

  // auto falls back to the newest good one and the run ends where the straight one did.
  fs::remove_all(dir);
  train(cfg, nullptr);  // checkpoints at 5, 10, 15 again
  Damage(ck / "step-15" / "state.json", false);
  const TrainOutcome resumed = train(cfg, nullptr);
  EXPECT_EQ(resumed.resumed_step, 10);
  EXPECT_EQ(resumed.params_fnv1a64, straight.params_fnv1a64);
}

// A format-1 checkpoint (FNV-1a 64 checksums) still verifies and resumes; a wrong checksum
// in it is still caught.
TEST(Checkpoint, FormatVersion1IsStillRead) {
  const fs::path dir = FreshDir("v1");
  Config cfg = SmallRun(dir.string(), 4);
  cfg.checkpoint.every = 4;
  train(cfg, nullptr);
  const fs::path step = dir / "checkpoints" / "step-4";
  nlohmann::json manifest = ReadJson(step / "manifest.json");
  manifest["format_version"] = 1;
  for (auto& [name, entry] : manifest["files"].items()) {
    std::ifstream in(step / name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(fnv1a64(bytes.data(), bytes.size())));
    entry.erase("xxh3_64");
    entry["fnv1a64"] = hex;
  }
  std::ofstream(step / "manifest.json") << manifest.dump(2);
  cfg.train.steps = 5;
  EXPECT_EQ(train(cfg, nullptr).resumed_step, 4);
  manifest["files"]["adam_v.bin"]["fnv1a64"] = "0123456789abcdef";
  std::ofstream(step / "manifest.json") << manifest.dump(2);
  cfg.checkpoint.resume = step.string();
  EXPECT_NE(ErrorOf(cfg).find("adam_v.bin does not match its checksum"), std::string::npos)
      << ErrorOf(cfg);
}

TEST(Checkpoint, RunDirWithAnEarlierRunIsRefusedUnlessOverwrite) {
  const fs::path dir = FreshDir("refuse");
  Config cfg = SmallRun(dir.string(), 3);
  train(cfg, nullptr);
  const std::string err = ErrorOf(cfg);
  EXPECT_NE(err.find("already holds an earlier run (steps.jsonl)"), std::string::npos) << err;
  EXPECT_NE(err.find("run.overwrite=true"), std::string::npos) << err;
  EXPECT_EQ(CountLines(dir / "steps.jsonl"), 3);  // untouched
  cfg.run.overwrite = true;
  train(cfg, nullptr);
  EXPECT_EQ(CountLines(dir / "steps.jsonl"), 3);  // replaced, not appended to
}

TEST(Checkpoint, AnotherModelShapeDtypeOrOptimizerIsRefused) {
  const fs::path dir = FreshDir("shape");
  Config cfg = SmallRun(dir.string(), 2);
  cfg.checkpoint.every = 2;
  train(cfg, nullptr);
  Config wider = cfg;
  wider.model.d_model = 64;
  wider.train.steps = 4;
  std::string err = ErrorOf(wider);
  EXPECT_NE(err.find("was written for another run: model.d_model is 32 there, 64 in the config"),
            std::string::npos)
      << err;
  Config fp16 = cfg;
  fp16.precision.dtype = DType::f16;
  fp16.train.steps = 4;
  err = ErrorOf(fp16);
  EXPECT_NE(err.find("precision.dtype is \"fp32\" there, \"fp16\" in the config"),
            std::string::npos)
      << err;
}

TEST(Checkpoint, BadResumePathIsInputError) {
  const fs::path dir = FreshDir("badpath");
  Config cfg = SmallRun((dir / "run").string(), 2);
  cfg.checkpoint.resume = (dir / "missing").string();
  EXPECT_NE(ErrorOf(cfg).find("is not a checkpoint directory"), std::string::npos);
  fs::create_directories(dir / "empty");
  cfg.checkpoint.resume = (dir / "empty").string();
  EXPECT_NE(ErrorOf(cfg).find("no manifest.json"), std::string::npos);
  std::ofstream(dir / "empty" / "manifest.json") << R"({"format_version": 3})";
  EXPECT_NE(ErrorOf(cfg).find("format version 3, this build reads version 2"), std::string::npos)
      << ErrorOf(cfg);
  std::ofstream(dir / "empty" / "manifest.json") << "{not json";
  EXPECT_NE(ErrorOf(cfg).find("manifest.json is not a checkpoint manifest"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "run"));  // nothing written
}

// A SIGTERM mid-run: the step in progress finishes, a checkpoint of it is saved, train()
// returns, and the next run resumes from exactly there.
TEST(Checkpoint, SigtermSavesAndStopsAfterTheStep) {
  const fs::path dir = FreshDir("sigterm");
  Config cfg = SmallRun(dir.string(), 400);
  cfg.checkpoint.every = 1000;
  std::thread killer([&] {
    while (CountLines(dir / "steps.jsonl") < 3)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::raise(SIGTERM);
  });
  const TrainOutcome a = train(cfg, nullptr);
  killer.join();
  ASSERT_TRUE(a.preempted);
  const int stopped = int(a.losses.size());
  ASSERT_LT(stopped, 400);
  EXPECT_EQ(a.last_checkpoint,
            (dir / "checkpoints" / ("step-" + std::to_string(stopped))).string());
  cfg.train.steps = stopped + 2;
  const TrainOutcome b = train(cfg, nullptr);
  EXPECT_EQ(b.resumed_step, stopped);
  EXPECT_EQ(b.losses.size(), 2u);
  EXPECT_FALSE(b.preempted);
}

}  // namespace
}  // namespace ringstep
