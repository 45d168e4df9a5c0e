// The diagnosis gallery (configs/sick/, docs/diagnosis.md): each sick run makes `report`
// fire its rule and no rule about another cause; applying the `--set` that the rule prints
// improves the figure it named, by a ratio measured in the same test; healthy configs fire
// nothing. Runs the real binary (under mpirun for two ranks), a few seconds per run.
//
// The host is shared and noisy, so the rules that measure the host rather than the config
// are tolerated where they are not the subject: step_spread (step times vary), kernels
// (MFU falls below 40% when other jobs take the cores between the peak measurement and
// the steps) and, with two ranks, straggler (one rank gets less CPU).
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "train/report.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

const MachineInfo& Machine() {
  static const MachineInfo m = measure_machine(1);
  return m;
}

// Trains configs/sick/NAME.yaml (or configs/NAME.yaml when HEALTHY) on RANKS ranks with
// SETS, into a fresh directory named after TAG, and analyzes it.
ReportData TrainAndReport(const std::string& config, int ranks, const std::vector<std::string>& sets,
               const std::string& tag) {
  // The pid keeps two suites on one machine (a clone's CI beside a work tree's) apart.
  const fs::path dir =
      fs::temp_directory_path() / ("ringstep_gallery_" + std::to_string(getpid()) + "_" + tag);
  fs::remove_all(dir);
  std::string cmd = ranks > 1 ? std::string(RINGSTEP_MPIEXEC) +
                                    " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " "
                              : "";
  cmd += std::string(RINGSTEP_BINARY) + " train " + RINGSTEP_SOURCE_DIR + "/configs/" + config +
         " --set run.out_dir=" + dir.string();
  for (const std::string& kv : sets) cmd += " --set " + kv;
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out;
  const ReportData r = analyze(dir.string(), Machine());
  fs::remove_all(dir);
  return r;
}

// R fired EXPECTED (empty: nothing) and nothing else but the tolerated host rules: those
// that judge this host's noise or kernel speeds rather than the config (slow_op fires when
// an op runs under 10% of its roofline bound, which tiny.yaml's attention does on some CPUs
// and not on others, and near the line moves with the load).
void ExpectFiredOnly(const ReportData& r, const std::string& expected, int ranks) {
  std::set<std::string> tolerated = {"step_spread", "kernels", "slow_op"};
  if (ranks > 1) tolerated.insert("straggler");
  tolerated.erase(expected);
  const std::vector<std::string> ids = r.fired();
  if (!expected.empty())
    EXPECT_NE(std::find(ids.begin(), ids.end(), expected), ids.end()) << report_text(r);
  for (const std::string& id : ids)
    EXPECT_TRUE(id == expected || tolerated.count(id)) << "unrelated rule " << id << "\n"
                                                       << report_text(r);
}

const Finding* Find(const ReportData& r, const std::string& id) {
  for (const Finding& f : r.findings)
    if (f.id == id) return &f;
  return nullptr;
}

// Runs the sick config, checks its rule, and reruns it with the rule's --set.
std::pair<ReportData, ReportData> SickAndTreated(const std::string& name, int ranks,
                                                 const std::string& rule) {
  const ReportData sick = TrainAndReport("sick/" + name + ".yaml", ranks, {}, name);
  ExpectFiredOnly(sick, rule, ranks);
  const Finding* f = Find(sick, rule);
  if (f == nullptr || f->sets.empty()) {
    ADD_FAILURE() << rule << " printed nothing to try";
    return {sick, sick};
  }
  return {sick, TrainAndReport("sick/" + name + ".yaml", ranks, f->sets, name + "_treated")};
}

bool EnoughCores(int ranks) { return int(std::thread::hardware_concurrency()) >= ranks; }

TEST(Gallery, OneBucketOnASlowLinkGetsSmallerBucketsAndLessExposedComm) {
  if (!EnoughCores(2)) GTEST_SKIP() << "timing needs a core per rank";
  const auto [sick, treated] = SickAndTreated("one_bucket_slow_link", 2, "bucket_size");
  EXPECT_GE(treated.comm.buckets, 4);
  // Exposed communication (the rank that waited least) falls by at least a quarter of
  // backward's time: with k buckets all but the last could hide behind backward, (1 - 1/k)
  // of it; a quarter leaves room for the engine thread sharing a core. (A fixed fraction of
  // the exposed time depends on how fast this host's backward is next to the link.)
  const double backward_ms = sick.pct.backward / 100 * sick.step_ms_p50;
  EXPECT_LE(treated.comm.exposed_ms, sick.comm.exposed_ms - 0.25 * backward_ms)
      << sick.comm.exposed_ms << " -> " << treated.comm.exposed_ms << " ms, backward "
      << backward_ms << " ms";
}

TEST(Gallery, StragglerIsNamedWithItsBusyTime) {
  if (!EnoughCores(2)) GTEST_SKIP() << "timing needs a core per rank";
  const auto [sick, treated] = SickAndTreated("straggler", 2, "straggler");
  const Finding* f = Find(sick, "straggler");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->evidence.find("rank 1 "), std::string::npos) << f->evidence;
  EXPECT_NE(f->evidence.find("busy"), std::string::npos) << f->evidence;
  // The busiest rank's lead over the median shrinks by half or more.
  const auto lead = [](const ReportData& r) { return r.comm.busy_ms_max - r.comm.busy_ms_median; };
  EXPECT_LE(lead(treated), 0.5 * lead(sick)) << lead(sick) << " -> " << lead(treated) << " ms";
}

TEST(Gallery, SmallMicroBatchGrowsItAndRunsFaster) {
  const auto [sick, treated] = SickAndTreated("small_micro_batch", 1, "micro_batch");
  EXPECT_EQ(treated.tokens_per_step, sick.tokens_per_step);  // the same global batch
  EXPECT_GE(treated.tokens_per_s, 1.5 * sick.tokens_per_s)
      << sick.tokens_per_s << " -> " << treated.tokens_per_s << " tokens/s";
}

TEST(Gallery, ThrashingFp16LossScaleStopsSkippingInBf16) {
  const auto [sick, treated] = SickAndTreated("fp16_loss_scale", 1, "loss_scale");
  EXPECT_GE(sick.skipped_steps, 2);
  EXPECT_EQ(treated.skipped_steps, 0);
}

TEST(Gallery, ActivationsNearTheLimitAreRecomputed) {
  const auto [sick, treated] = SickAndTreated("activations_near_limit", 1, "activation_memory");
  EXPECT_LE(double(treated.activations_peak_bytes), 0.75 * double(sick.activations_peak_bytes));
  EXPECT_EQ(Find(treated, "activation_memory"), nullptr) << report_text(treated);
}

TEST(Gallery, SlowInputPipelineIsFound) {
  const auto [sick, treated] = SickAndTreated("slow_input", 1, "input_pipeline");
  EXPECT_LE(treated.pct.data, 0.2 * sick.pct.data) << sick.pct.data << "% -> " << treated.pct.data;
}

TEST(Gallery, HealthyConfigsFireNothing) {
  const std::vector<std::string> shorter = {"train.steps=12", "train.eval_every=0",
                                            "train.eval_batches=1", "run.threads=1",
                                            "run.overwrite=true"};
  ExpectFiredOnly(TrainAndReport("tiny.yaml", 1, shorter, "tiny"), "", 1);
  std::vector<std::string> small = shorter;
  small[0] = "train.steps=8";
  ExpectFiredOnly(TrainAndReport("small.yaml", 1, small, "small"), "", 1);
}

}  // namespace
}  // namespace ringstep
