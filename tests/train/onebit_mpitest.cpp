// 1-bit Adam through the trainer on 2, 3 and 4 ranks, with one scale per tensor and with
// scale blocks: after 20 compressed steps every rank
// holds the same parameters bit for bit, the records show the stage, the bytes and the
// compression error; a run resumed inside the compression stage is bit-identical to one
// that never stopped; an fp16 overflow skipped in the compression stage leaves the
// parameters, both moments and both error buffers exactly as they were, with the exchange
// under backward and after it; a resume on another world size keeps the compressed error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/files.h"
#include "models/gpt.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "train/checkpoint.h"
#include "train/checkpoint_run.h"
#include "train/data.h"
#include "train/report.h"
#include "train/small_run.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

using ringstep::testing::world;
namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_dir(world(), "onebit", name);
}

Config OneBitRun(const std::string& out_dir, int steps, int freeze_step) {
  Config cfg = ringstep::testing::SmallRun(out_dir, steps);
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  cfg.optimizer.onebit.freeze_step = freeze_step;
  cfg.optimizer.onebit.compress = OneBitCompress::always;  // auto: OneBitAuto below
  cfg.comm.bucket_mb = 0.01;  // several buckets, each with several tensors
  cfg.train.grad_clip = 0.5;  // clipping active in the compression stage too
  cfg.train.weight_decay = 0.1;
  return cfg;
}

std::vector<nlohmann::json> records(const fs::path& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "steps.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Scale blocks of 48 elements: several per tensor, crossing server chunks, the last block of
// a tensor shorter (each test below also runs with one scale per tensor).
constexpr int kScaleBlock = 48;

// (scale_block, optimizer.onebit.overlap): the exchange after backward or under it.
class OneBitMultiRank : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  Config Run(const std::string& out_dir, int steps, int freeze_step) const {
    Config cfg = OneBitRun(out_dir, steps, freeze_step);
    cfg.optimizer.onebit.scale_block = std::get<0>(GetParam());
    cfg.optimizer.onebit.overlap = std::get<1>(GetParam());
    return cfg;
  }
};
INSTANTIATE_TEST_SUITE_P(ScaleBlockAndOverlap, OneBitMultiRank,
                         ::testing::Combine(::testing::Values(0, kScaleBlock), ::testing::Bool()));

TEST_P(OneBitMultiRank, RanksHoldIdenticalParamsAfter20CompressedSteps) {
  const fs::path dir = fresh_dir("replicas");
  Config cfg = Run(dir.string(), 25, 5);
  cfg.train.check_replicas_every = 1;  // throws CommError as soon as replicas differ
  const TrainOutcome r = train(cfg, &world());
  std::vector<uint64_t> all(size_t(world().size()));
  all[size_t(world().rank())] = r.params_fnv1a64;
  world().allgather_bytes(all.data(), sizeof(uint64_t));
  for (uint64_t h : all) EXPECT_EQ(h, all[0]);
  if (world().rank() != 0) return;
  const auto recs = records(dir);
  ASSERT_EQ(recs.size(), 25u);
  // The volume target, 1/25 of the ring, with one scale per tensor; a scale per block adds
  // 32 bits per block to the 1 bit per element.
  const double block = std::get<0>(GetParam());
  const double limit = recs[0]["comm_sent_bytes"].get<double>() / 25 * (block ? 1 + 32 / block : 1);
  for (const auto& rec : recs) {
    const int step = rec["step"];
    EXPECT_EQ(rec["stage"], step <= 5 ? "warmup" : "compressed") << step;
    if (step <= 5) continue;
    EXPECT_LE(rec["comm_sent_bytes"].get<double>(), limit) << step;
    EXPECT_GT(rec["comm_sent_bytes"].get<double>(), 0) << step;
    EXPECT_GT(rec["compression_error"].get<double>(), 0) << step;
    EXPECT_LT(rec["compression_error"].get<double>(), 1.5) << step;
  }
}

TEST_P(OneBitMultiRank, ResumeInsideTheCompressionStageIsBitExact) {
  const fs::path dir = fresh_dir("resume");
  const Config cfg = Run("", 20, 4);
  const auto r = ringstep::testing::RunStraightAndResumed(cfg, dir, &world());
  ringstep::testing::ExpectResumedMatchesStraight(r);
}

// Without clipping the exchange under backward computes what the exchange after it does: the
// same momenta, sent in the same order, give the same bits. (With clipping the two differ:
// under backward the coefficient is the previous step's.)
TEST(OneBitOverlap, WithoutClippingMatchesTheExchangeAfterBackwardBitForBit) {
  TrainOutcome runs[2];
  for (bool overlap : {false, true}) {
    const fs::path dir = fresh_dir(overlap ? "under" : "after");
    Config cfg = OneBitRun(dir.string(), 15, 4);
    cfg.train.grad_clip = 0;
    cfg.profile.log_every = 1;
    cfg.optimizer.onebit.overlap = overlap;
    runs[overlap] = train(cfg, &world());
  }
  EXPECT_EQ(runs[0].losses, runs[1].losses);
  EXPECT_EQ(runs[0].params_fnv1a64, runs[1].params_fnv1a64);
}

// With clipping active, the first compressed step under backward clips by the last warm-up
// step's norm, so the runs part there, and not before.
TEST(OneBitOverlap, WithClippingTheRunsPartAtTheFirstCompressedStep) {
  TrainOutcome runs[2];
  for (bool overlap : {false, true}) {
    const fs::path dir = fresh_dir(overlap ? "clip_under" : "clip_after");
    Config cfg = OneBitRun(dir.string(), 8, 4);
    cfg.train.grad_clip = 1e-3;  // every step clipped, by a coefficient that changes
    cfg.profile.log_every = 1;
    cfg.optimizer.onebit.overlap = overlap;
    runs[overlap] = train(cfg, &world());
  }
  ASSERT_EQ(runs[0].losses.size(), 8u);
  ASSERT_EQ(runs[1].losses.size(), 8u);
  // Step 5 (the first compressed) is computed with different momenta; its loss was taken
  // before the update, so the losses part from step 6 on.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(runs[0].losses[i], runs[1].losses[i]) << "step " << i + 1;
  EXPECT_NE(runs[0].losses[5], runs[1].losses[5]);
  EXPECT_NE(runs[0].params_fnv1a64, runs[1].params_fnv1a64);
}

// Every file of the step-(N-1) and step-N checkpoints but state.json and the manifest.
void ExpectSameState(const fs::path& before, const fs::path& after) {
  for (const auto& e : fs::directory_iterator(before)) {
    const std::string f = e.path().filename().string();
    if (f == "state.json" || f == "manifest.json" || f == "config.yaml") continue;
    EXPECT_TRUE(read_regular_file(e.path().string(), kNoSizeLimit, "a") ==
                read_regular_file((after / f).string(), kNoSizeLimit, "b"))
        << f << " changed in a skipped step";
  }
}

// With the exchange under backward (the default) the momenta of a step that overflows are
// formed and sent before the overflow is known; skipping it must still leave every buffer as
// it was. After backward, nothing of the step is sent.
class OneBitFp16 : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Overlap, OneBitFp16, ::testing::Bool());

TEST_P(OneBitFp16, SkipInTheCompressionStageLeavesEveryBufferUntouched) {
  const fs::path dir = fresh_dir(GetParam() ? "skip_under" : "skip_after");
  Config cfg = ringstep::testing::Fp16Dynamic(OneBitRun(dir.string(), 30, 2));
  cfg.optimizer.onebit.overlap = GetParam();
  cfg.checkpoint.every = 1;
  cfg.checkpoint.keep = 100;
  train(cfg, &world());
  world().barrier();
  if (world().rank() != 0) return;
  int checked = 0, applied = 0;
  for (const auto& rec : records(dir)) {
    if (rec["stage"] != "compressed") continue;
    if (!rec["skipped"].get<bool>()) {
      ++applied;
      continue;
    }
    const int n = rec["step"];
    const fs::path ckpt = dir / "checkpoints";
    ExpectSameState(ckpt / ("step-" + std::to_string(n - 1)), ckpt / ("step-" + std::to_string(n)));
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no overflow fell in the compression stage";
  EXPECT_GT(applied, 0) << "no compressed step was applied";
}

// summary.json's compress_choice against the run's own records, and `ringstep report` on
// that directory: the verdict is the stage of every step after the warm-up and follows
// from the numbers written, the bytes compared are the bytes the two stages sent, and the
// report shows the log's line and the summary's object.
void ExpectSummaryAndReportShowTheChoice(const fs::path& dir, int freeze_step) {
  nlohmann::json summary;
  std::ifstream(dir / "summary.json") >> summary;
  const nlohmann::json& c = summary["compress_choice"];
  ASSERT_TRUE(c.is_object()) << summary.dump(2);
  EXPECT_EQ(c["from_step"], freeze_step + 1);
  const double exposed = c["fp32_exposed_ms"], code = c["code_ms"];
  const double predicted = c["compressed_exposed_ms"];
  EXPECT_GE(code, 0.0);
  EXPECT_EQ(c["compressed"].get<bool>(), exposed > code + predicted) << c;
  const auto recs = records(dir);
  const std::string chosen = c["compressed"].get<bool>() ? "compressed" : "warmup";
  for (const auto& rec : recs) {
    const int step = rec["step"];
    EXPECT_EQ(rec["stage"], step <= freeze_step ? "warmup" : chosen) << step;
    if (step <= freeze_step) EXPECT_EQ(rec["comm_sent_bytes"], c["fp32_sent_bytes"]) << step;
    if (step > freeze_step && chosen == "compressed")
      EXPECT_EQ(rec["comm_sent_bytes"], c["onebit_sent_bytes"]) << step;
  }
  const ReportData r = analyze(dir.string());
  ASSERT_TRUE(r.compress_choice.has_value());
  const std::string text = report_text(r);
  EXPECT_NE(text.find(r.compress_choice->describe()), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(report_json(r))["onebit"]["compress_choice"], c);
}

// compress: auto at a slow emulated link (0.02 Gb/s: the fp32 AllReduce of this model
// takes about 45 ms a step, the 1-bit exchange 1/32 of it) compresses, and says so with
// the numbers it compared in the summary and the report.
TEST(OneBitAuto, ASlowLinkCompressesAndTheSummarySaysWhy) {
  const fs::path dir = fresh_dir("auto_slow");
  Config cfg = OneBitRun(dir.string(), 7, 4);
  cfg.optimizer.onebit.compress = OneBitCompress::auto_;
  cfg.comm.link.bandwidth_gbps = 0.02;
  MpiCommunicator slow(MPI_COMM_WORLD, cfg.comm.link);
  train(cfg, &slow);
  if (world().rank() != 0) return;
  nlohmann::json summary;
  std::ifstream(dir / "summary.json") >> summary;
  EXPECT_EQ(summary["compress_choice"]["compressed"], true) << summary.dump(2);
  ExpectSummaryAndReportShowTheChoice(dir, 4);
}

// compress: auto decides from what this machine measured, so the test does not know which
// way it goes; it holds that every rank goes the same way (replicas checked every step),
// that every step after the warm-up has the chosen stage, and that a resume after the
// decision keeps it (the choice and its numbers are checkpointed) rather than measuring
// again; the summary and the report show the choice (a fast link: either way).
TEST(OneBitAuto, EveryRankMakesOneChoiceAndAResumeKeepsIt) {
  const fs::path dir = fresh_dir("auto");
  Config cfg = OneBitRun(dir.string(), 8, 4);
  cfg.optimizer.onebit.compress = OneBitCompress::auto_;
  cfg.train.check_replicas_every = 1;
  cfg.checkpoint.every = 8;
  train(cfg, &world());
  cfg.train.steps = 14;
  const TrainOutcome resumed = train(cfg, &world());
  EXPECT_EQ(resumed.resumed_step, 8);
  if (world().rank() != 0) return;
  const auto recs = records(dir);
  ASSERT_EQ(recs.size(), 14u);
  const std::string chosen = recs[4]["stage"];
  for (const auto& rec : recs) {
    const int step = rec["step"];
    EXPECT_EQ(rec["stage"], step <= 4 ? "warmup" : chosen) << step;
  }
  ExpectSummaryAndReportShowTheChoice(dir, 4);
}

// compress: never is AdamW on every step, bit for bit: the warm-up and what follows it.
TEST(OneBitNever, IsAdamWBitForBit) {
  TrainOutcome runs[2];
  for (bool onebit : {false, true}) {
    const fs::path dir = fresh_dir(onebit ? "never" : "never_adamw");
    Config cfg = OneBitRun(dir.string(), 10, 4);
    cfg.profile.log_every = 1;
    if (onebit)
      cfg.optimizer.onebit.compress = OneBitCompress::never;
    else
      cfg.optimizer.name = OptimizerKind::adamw;
    runs[onebit] = train(cfg, &world());
  }
  EXPECT_EQ(runs[0].losses, runs[1].losses);
  EXPECT_EQ(runs[0].params_fnv1a64, runs[1].params_fnv1a64);
}

// A resume on another world size keeps the error feedback's mean_r e_w + e_s: every rank's
// worker error is the saved ranks' mean worker error plus the sum of their server buffers,
// and the server error is 0. Checked on the checkpoint of a run on this world, loaded as
// rank 0 of one rank and as the last rank of one more.
TEST(OneBitWorldChange, ResumeOnAnotherWorldSizeKeepsTheCompressedError) {
  const fs::path dir = fresh_dir("world_change");
  Config cfg = OneBitRun(dir.string(), 10, 4);
  cfg.checkpoint.every = 10;
  train(cfg, &world());
  world().barrier();
  if (world().rank() != 0) return;
  const int n = world().size();
  const fs::path ckpt = dir / "checkpoints" / "step-10";
  Gpt model(cfg.model);
  const size_t count = model.registry().total_numel();
  std::vector<float> sum_w(count, 0.0f), sum_s(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    const std::string bytes = read_regular_file(
        (ckpt / ("onebit-rank-" + std::to_string(r) + ".bin")).string(), kNoSizeLimit, "t");
    ASSERT_EQ(bytes.size(), 2 * count * sizeof(float));
    const float* f = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < count; ++i) {
      sum_w[i] += f[i];
      sum_s[i] += f[count + i];
    }
  }
  bool any_server = false;
  for (float v : sum_s) any_server = any_server || v != 0.0f;
  ASSERT_TRUE(any_server) << "the saved server errors are all zero: nothing to keep";
  for (const auto& [rank, new_world] : {std::pair{0, 1}, std::pair{n, n + 1}}) {
    TrainState state(model.registry(), cfg, make_data_source(cfg, "train", rank, new_world));
    FlatBuffer params(count);
    load_checkpoint(ckpt.string(), cfg, rank, new_world, params, state);
    std::vector<FlatBuffer*> per_rank;  // the worker error, then the server's
    for (const StateTensor& t : state.optimizer->state_tensors())
      if (t.per_rank) per_rank.push_back(t.buffer);
    ASSERT_EQ(per_rank.size(), 2u);
    EXPECT_EQ(state.optimizer->step_count(), 10);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(per_rank[0]->data()[i], sum_w[i] * (1.0f / float(n)) + sum_s[i])
          << "worker error " << i << " on " << new_world << " ranks";
      ASSERT_EQ(per_rank[1]->data()[i], 0.0f) << "server error " << i;
    }
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
