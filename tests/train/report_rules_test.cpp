// The cause-based diagnosis rules and the measured roofline, on the hand-made healthy
// fixture changed one cause at a time (the numbers in tests/train/report_fixture.h).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/profiler.h"
#include "models/gpt.h"
#include "train/grad_sync.h"
#include "train/report.h"
#include "train/report_fixture.h"

namespace ringstep {
namespace {

using namespace ringstep::testing;

// A copy of FIXTURE with CHANGE applied to every record and FROM -> TO in its config.yaml.
fs::path Changed(const std::string& fixture, const std::string& name,
                 const std::function<void(json&)>& change, const std::string& from = "",
                 const std::string& to = "") {
  const fs::path dir = CopyFixture(fixture, name);
  std::vector<json> recs = ReadSteps(dir);
  for (json& r : recs) change(r);
  WriteSteps(dir, recs);
  if (!from.empty()) {
    std::ifstream in(dir / "config.yaml");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(dir / "config.yaml", std::ios::trunc) << text;
  }
  return dir;
}

void SetSummary(const fs::path& dir, const char* key, const json& value) {
  std::ifstream in(dir / "summary.json");
  json summary = json::parse(in);
  in.close();
  summary[key] = value;
  std::ofstream(dir / "summary.json", std::ios::trunc) << summary.dump(2);
}

json Op(const char* phase, const char* op, double ms, double flops, double bytes) {
  return {{"phase", phase}, {"op", op},       {"calls", 4},
          {"ms", ms},       {"flops", flops}, {"bytes", bytes}};
}

// Two ranks where each waits EXPOSED ms of a step for COMM ms of communication; the time
// comes out of backward, so the sum rule still holds. The ranks agree on every phase.
std::function<void(json&)> Comm(double comm, double exposed, double busbw = 0) {
  return [=](json& r) {
    json& t = r["time_ms"];
    t["backward"] = double(t["backward"]) - exposed;
    t["comm"] = comm, t["comm_exposed"] = exposed;
    for (size_t f = 1; f < kPhaseFields.size(); ++f) {
      const double ms = t[kPhaseFields[f].name];
      r["ranks"]["phase_ms"][kPhaseFields[f].name] = {{"min", ms}, {"median", ms}, {"max", ms}};
    }
    r["comm_busbw_gbs"] = busbw;
  };
}

// With the machine of BigMachine (peak 100 GFLOP/s, 5 GB/s): qkv needs 10 ms at peak and
// takes 10; attention's 2e8 FLOPs and 1e7 bytes need 2 ms and take 40, 5% of its bound.
TEST(ReportRules, MeasuredRooflineSortsOpsAndNamesTheOneFarBelowItsBound) {
  const fs::path dir = Changed("healthy", "slow_op", [](json& r) {
    r["ops"] = {Op("forward", "qkv", 10, 1e9, 1e7), Op("backward", "attention", 40, 2e8, 1e7)};
  });
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.op_steps, 18);
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].op, Op::attention);  // longest first
  EXPECT_EQ(r.ops[0].phase, OpPhase::backward);
  EXPECT_NEAR(r.ops[0].share_pct, 80, kEps);
  EXPECT_NEAR(r.ops[0].bound_ms, 2, kEps);
  EXPECT_NEAR(r.ops[0].bound_frac, 0.05, kEps);
  EXPECT_NEAR(r.ops[0].gflops, 5, kEps);
  EXPECT_NEAR(r.ops[1].bound_frac, 1, kEps);
  EXPECT_EQ(r.ops[1].bound, "compute");
  EXPECT_EQ(r.fired(), std::vector<std::string>{"slow_op"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"precision.dtype=bf16"});
  EXPECT_NE(report_text(r).find("furthest below their bound: backward attention (5.0%"),
            std::string::npos)
      << report_text(r);
  fs::remove_all(dir);
}

TEST(ReportRules, BandwidthBoundStepAdvisesFusionAndBf16) {
  // gelu: 1e8 bytes need 20 ms at 5 GB/s and take 30 (67% of its bound): 75% of the ops.
  const fs::path dir = Changed("healthy", "memory_bound", [](json& r) {
    r["ops"] = {Op("forward", "qkv", 10, 1e9, 1e7), Op("forward", "gelu", 30, 1e7, 1e8)};
  });
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.fired(), std::vector<std::string>{"memory_bound"});
  EXPECT_NE(r.findings[0].evidence.find("75.0%"), std::string::npos) << r.findings[0].evidence;
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"precision.dtype=bf16"});
  fs::remove_all(dir);
}

TEST(ReportRules, NoOverlapWithOneBucketComputesABucketSizeForFourOrMore) {
  // 25 ms of every steady step (~23%) exposed out of 25.5 ms of communication.
  const fs::path dir = Changed("healthy", "bucket", Comm(25.5, 25));
  ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.comm.buckets, 1);
  EXPECT_NEAR(r.comm.exposed_ms, 25, kEps);
  ASSERT_EQ(r.fired(), std::vector<std::string>{"bucket_size"});
  // tiny: 3.21 MiB of gradients in blocks of 0.756 MiB; 0.72 MiB puts each in its own.
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.bucket_mb=0.72"});
  EXPECT_EQ(gradient_buckets(r.config.model, 0.72), 5);

  const fs::path off =
      Changed("healthy", "overlap_off", Comm(25.5, 25), "overlap: true", "overlap: false");
  r = analyze(off.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_overlap_off"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.overlap=true"});
  fs::remove_all(dir);
  fs::remove_all(off);
}

TEST(ReportRules, GoodOverlapComparesTheBusBandwidthWithTheLink) {
  // Overlap 1 - 25/60 = 58%; the emulated 1 Gb/s link carries 0.125 GB/s.
  const fs::path dir =
      Changed("healthy", "link", Comm(60, 25, 0.1), "bandwidth_gbps: 0.0", "bandwidth_gbps: 1.0");
  ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_NE(r.findings[0].evidence.find("= 80% of the emulated link's 0.125 GB/s"),
            std::string::npos)
      << r.findings[0].evidence;
  EXPECT_NE(r.findings[0].advice.find("1-bit Adam"), std::string::npos);
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"optimizer.name=onebit_adam"});
  // With 1-bit Adam already on, what is left is its full-precision warm-up.
  const fs::path onebit = Changed("healthy", "onebit_on", Comm(60, 25, 0.1), "bandwidth_gbps: 0.0",
                                  "bandwidth_gbps: 1.0");
  {
    std::ifstream in(onebit / "config.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = yaml.find("name: adamw");
    ASSERT_NE(at, std::string::npos) << yaml;
    yaml.replace(at, 11, "name: onebit_adam");
    std::ofstream(onebit / "config.yaml") << yaml;
  }
  r = analyze(onebit.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_EQ(r.findings[0].sets.size(), 1u);
  EXPECT_EQ(r.findings[0].sets[0].rfind("optimizer.onebit.freeze_step=", 0), 0u)
      << r.findings[0].sets[0];
  fs::remove_all(onebit);
  // At 16% of the link the messages, not the link, are the limit: larger buckets.
  const fs::path slow = Changed("healthy", "slow_messages", Comm(60, 25, 0.02),
                                "bandwidth_gbps: 0.0", "bandwidth_gbps: 1.0");
  r = analyze(slow.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"comm_bandwidth"});
  EXPECT_EQ(r.findings[0].sets, std::vector<std::string>{"comm.bucket_mb=50"});
  fs::remove_all(dir);
  fs::remove_all(slow);
}

TEST(ReportRules, SmallMicroBatchKeepsTheGlobalBatchInPlaceOfBlamingTheKernels) {
  // 8 x 16 = 128 rows per product; a peak of 200 puts MFU at 25%.
  const fs::path dir = Changed(
      "healthy", "micro", [](json&) {}, "micro_batch: 8\n  grad_accum_steps: 2",
      "micro_batch: 1\n  grad_accum_steps: 16");
  SetSummary(dir, "peak_gflops", 200.0);
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"micro_batch"});
  EXPECT_EQ(r.findings[0].sets,
            (std::vector<std::string>{"train.micro_batch=4", "train.grad_accum_steps=4"}));
  fs::remove_all(dir);
}

TEST(ReportRules, StragglerIsNamedByBusyTimeAndItsWaitIsNotBlamedOnTheNetwork) {
  // Rank 1 is named from step 3 on and is busy 150 ms while the others are busy 100 ms;
  // the fast rank waits 50 ms, the straggler itself 0.
  const fs::path dir = Changed("healthy", "straggler", [](json& r) {
    Comm(50, 50)(r);
    r["ranks"]["world"] = 2;
    r["ranks"]["phase_ms"]["comm_exposed"]["min"] = 0.0;
    r["ranks"]["straggler"] = int(r["step"]) >= 3 ? json(1) : json(nullptr);
    r["ranks"]["busy_ms_max"] = 150.0;
    r["ranks"]["busy_ms_median"] = 100.0;
  });
  SetSummary(dir, "world", 2);
  const ReportData r = analyze(dir.string(), BigMachine());
  ASSERT_EQ(r.fired(), std::vector<std::string>{"straggler"});
  EXPECT_NE(r.findings[0].evidence.find("rank 1 was named a straggler in 18 of 18 steady steps"),
            std::string::npos)
      << r.findings[0].evidence;
  EXPECT_NE(r.findings[0].evidence.find("busy 150.0 ms per step against the median rank's 100.0"),
            std::string::npos);
  fs::remove_all(dir);
}

// One rank's network facts as summary.json holds them: LINK and CAP in Gbit/s (null:
// unknown), OUT TCP segments sent of which RETRANS resent over the run (-1: unknown).
json Link(const char* iface, json link, json cap, int64_t out, int64_t retrans) {
  const auto count = [](int64_t n) { return n >= 0 ? json(n) : json(nullptr); };
  json start = {{"link_gbps", link},
                {"cap_gbps", cap},
                {"tcp_out_segs", count(out >= 0 ? 1000 : -1)},
                {"tcp_retrans_segs", count(retrans >= 0 ? 10 : -1)},
                {"tx_bytes", 0},
                {"rx_bytes", 0},
                {"tx_dropped", 0},
                {"rx_dropped", 0},
                {"tx_errors", 0},
                {"rx_errors", 0}};
  json end = start;
  end["tcp_out_segs"] = count(out >= 0 ? 1000 + out : -1);
  end["tcp_retrans_segs"] = count(retrans >= 0 ? 10 + retrans : -1);
  end["tx_bytes"] = 68000000, end["rx_bytes"] = 67000000;
  return {{"interface", iface}, {"start", start}, {"end", end}};
}

// The healthy fixture as a run on WORLD hosts whose exchange takes 55 ms of which 50 are
// exposed at BUSBW GB/s, each rank's network facts in LINKS.
fs::path SlowExchange(const std::string& name, double busbw, const json& links) {
  const int world = int(links.size());
  const fs::path dir = Changed("healthy", name, [&](json& r) {
    Comm(55, 50, busbw)(r);
    r["ranks"]["world"] = world;
  });
  SetSummary(dir, "world", world);
  SetSummary(dir, "network", links);
  return dir;
}

const Finding* SlowLink(const ReportData& r) {
  for (const Finding& f : r.findings)
    if (f.id == "slow_link") return &f;
  return nullptr;
}

// 2 namespace hosts at 1 Gbit/s, host 2 reshaped to 0.1 (launch/testhosts): rank 1's own
// interface holds the tbf at 0.1 and the bus bandwidth matches it. Its peer resent what
// the far end of rank 1's link dropped; rank 1 resent nothing.
TEST(ReportRules, SlowLinkNamesTheRankWhoseCapTheBusBandwidthMatches) {
  const fs::path dir = SlowExchange(
      "slow_link", 0.012, {Link("eth0", 10, 1, 42458, 1658), Link("eth0", 10, 0.1, 47873, 0)});
  const ReportData r = analyze(dir.string(), BigMachine());
  EXPECT_EQ(r.fired(), (std::vector<std::string>{"bucket_size", "slow_link"}));
  const Finding* f = SlowLink(r);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->evidence.substr(0, f->evidence.find(" (exposed")),
            "rank 1's link (eth0) is capped at 0.1 Gbit/s by its root qdisc, the others' at "
            "1 Gbit/s; measured busbw 0.012 GB/s = 96% of the 0.0125 GB/s it carries");
  EXPECT_NE(f->evidence.find("TCP segments resent over the run (in each rank's network namespace): "
                             "rank 0 1658 of 42458 (3.91%), rank 1 0 of 47873 (0.00%)"),
            std::string::npos)
      << f->evidence;
  EXPECT_NE(f->advice.find("tc qdisc show dev eth0"), std::string::npos) << f->advice;
  EXPECT_TRUE(f->sets.empty());
  ASSERT_EQ(r.comm.links.size(), 2u);
  EXPECT_EQ(r.comm.links[1].rate_gbps, 0.1);
  EXPECT_TRUE(r.comm.links[1].capped);
  EXPECT_EQ(r.comm.links[0].tcp_retrans_segs, 1658);
  EXPECT_EQ(r.comm.links[0].tx_bytes, 68000000);
  const std::string text = report_text(r);
  EXPECT_NE(text.find("network      rank 0: eth0, link 10 Gbit/s, root qdisc caps it at 1 Gbit/s | "
                      "over the run: TCP segments resent 1.7k of 42.5k (3.91%)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[slow_link] rank 1's link (eth0)"), std::string::npos);
  const json j = json::parse(report_json(r));
  EXPECT_EQ(j["network"][1]["rate_gbps"], 0.1);
  EXPECT_EQ(j["network"][0]["tcp_retrans_segs"], 1658);
  fs::remove_all(dir);
}

TEST(ReportRules, SlowLinkFromLinkSpeedsAndForSeveralRanksOnOneHost) {
  // No cap readable (null): the link speeds tell, 1 against 25 Gbit/s.
  fs::path dir = SlowExchange(
      "slow_speed", 0.12, {Link("ens1", 25, nullptr, -1, -1), Link("ens1", 1, nullptr, -1, -1)});
  ReportData r = analyze(dir.string(), BigMachine());
  const Finding* f = SlowLink(r);
  ASSERT_TRUE(f) << report_text(r);
  EXPECT_EQ(f->evidence.substr(0, f->evidence.find(" (exposed")),
            "rank 1's link (ens1) is at 1 Gbit/s (link speed), the others' at 25 Gbit/s; measured "
            "busbw 0.12 GB/s = 96% of the 0.125 GB/s it carries");
  EXPECT_EQ(f->evidence.find("TCP segments"), std::string::npos);  // counters unknown
  fs::remove_all(dir);
  // 2 hosts of 2 ranks, the second host's link capped; a third speed among the others.
  dir = SlowExchange("slow_host", 0.011,
                     {Link("eth0", 10, 1, 100, 0), Link("eth0", 10, 2, 100, 0),
                      Link("eth0", 10, 0.1, 100, 0), Link("eth0", 10, 0.1, 100, 0)});
  r = analyze(dir.string(), BigMachine());
  f = SlowLink(r);
  ASSERT_TRUE(f) << report_text(r);
  EXPECT_EQ(f->evidence.substr(0, f->evidence.find(";")),
            "the links of ranks 2, 3 (eth0) are capped at 0.1 Gbit/s by their root qdiscs, the "
            "others' at 1 to 2 Gbit/s");
  fs::remove_all(dir);
}

// With no rate to tell the ranks apart (a veth's speed, no qdisc cap), the loss tells: the
// rank that resent is the one sending into the slow link.
TEST(ReportRules, SlowLinkFromRetransmissionsWhereNoRateNamesARank) {
  const fs::path dir =
      SlowExchange("slow_loss", 0.012,
                   {Link("eth0", nullptr, 0, 42458, 1658), Link("eth0", nullptr, 0, 47873, 0)});
  const ReportData r = analyze(dir.string(), BigMachine());
  const Finding* f = SlowLink(r);
  ASSERT_TRUE(f) << report_text(r);
  EXPECT_EQ(f->evidence.substr(0, f->evidence.find(" (exposed")),
            "rank 1's link (eth0) loses what rank 0 sends it: rank 0 1658 of 42458 (3.91%) TCP "
            "segments resent, against rank 1 0 of 47873 (0.00%); measured busbw 0.012 GB/s");
  EXPECT_NE(f->advice.find("a link into rank 1 slower than rank 0's"), std::string::npos);
  fs::remove_all(dir);
  // Rates known but the exchange below half of even the slow one's (a starved CPU): the
  // resends still name the rank, and no rate is claimed to explain the bandwidth.
  const fs::path starved = SlowExchange(
      "slow_starved", 0.004, {Link("eth0", 10, 1, 42458, 1658), Link("eth0", 10, 0.1, 47873, 0)});
  const ReportData s = analyze(starved.string(), BigMachine());
  f = SlowLink(s);
  ASSERT_TRUE(f) << report_text(s);
  EXPECT_EQ(f->evidence.rfind("rank 1's link (eth0) loses what rank 0 sends it", 0), 0u)
      << f->evidence;
  fs::remove_all(starved);
}

// No blame where the facts do not single out one link.
TEST(ReportRules, SlowLinkStaysQuietOnEqualLinksUnknownFactsOrAnUnexplainedBandwidth) {
  const auto quiet = [](const std::string& name, double busbw, const json& links) {
    const fs::path dir = SlowExchange(name, busbw, links);
    const ReportData r = analyze(dir.string(), BigMachine());
    EXPECT_FALSE(SlowLink(r)) << name << "\n" << report_text(r);
    fs::remove_all(dir);
  };
  // Healthy: two hosts at 1 Gbit/s, the exchange at the link's rate, a few segments resent.
  quiet("equal", 0.118, {Link("eth0", 10, 1, 40000, 3), Link("eth0", 10, 1, 40000, 2)});
  // Nothing known: no network between the ranks, or every reader failed.
  quiet("one_host", 0.5, {Link("", nullptr, nullptr, -1, -1), Link("", nullptr, nullptr, -1, -1)});
  quiet("unknown", 0.012,
        {Link("eth0", nullptr, nullptr, -1, -1), Link("eth0", nullptr, nullptr, -1, -1)});
  // One rate unknown: "the others" cannot be compared.
  quiet("half_known", 0.012,
        {Link("eth0", nullptr, nullptr, -1, -1), Link("eth0", 10, 0.1, 100, 0)});
  // A slower link that does not explain the bandwidth: 16% of what it carries.
  quiet("unexplained", 0.002, {Link("eth0", 10, 1, 100, 0), Link("eth0", 10, 0.1, 100, 0)});
  // Both ranks lose segments: no direction stands out.
  quiet("both_lossy", 0.012,
        {Link("eth0", nullptr, 0, 40000, 1600), Link("eth0", nullptr, 0, 40000, 800)});
  // The healthy fixture (one rank, no network facts) fires nothing, as before.
  const ReportData h = analyze((kFixtures / "healthy").string(), BigMachine());
  EXPECT_TRUE(h.findings.empty()) << report_text(h);
  EXPECT_TRUE(h.comm.links.empty());
}

// The report counts buckets from the config alone; GradSync cuts the real buffer.
TEST(ReportRules, GradientBucketsMatchGradSync) {
  for (const char* file : {"tiny.yaml", "small.yaml"}) {
    const Config cfg = load_config(std::string(RINGSTEP_SOURCE_DIR) + "/configs/" + file);
    Gpt model(cfg.model);
    for (double mb : {25.0, 2.0, 1.5, 0.72, 0.5, 0.05}) {
      CommConfig comm = cfg.comm;
      comm.bucket_mb = mb;
      GradSync sync(nullptr, comm);
      sync.setup(model);
      EXPECT_EQ(gradient_buckets(cfg.model, mb), int(sync.buckets().size())) << file << " " << mb;
    }
  }
}

}  // namespace
}  // namespace ringstep
