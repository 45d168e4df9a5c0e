// The diagnosis: each rule reads the report's numbers, and where it can names the cause and
// the `--set` that addresses it (docs/logs.md, "Diagnosis", has the table; docs/diagnosis.md
// shows each rule on a sick run). Rules that share a symptom are ordered so that one cause
// is named once: waiting for a straggler is not blamed on the network, and a batch too small
// for the kernels is not blamed on the kernels.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/gpt.h"
#include "train/grad_sync.h"
#include "train/report.h"

namespace ringstep {
namespace {

// Thresholds (docs/logs.md "Diagnosis").
constexpr double kExposedCommPct = 30;  // comm_exposed: exposed comm, % of step, cause unknown
constexpr double kCommCausePct = 10;    // exposed comm worth naming a cause for
constexpr double kNoOverlap = 0.1;      // overlap below this is none
constexpr double kGoodOverlap = 0.5;    // overlap at or above this is good
constexpr int kFewBuckets = 2;
constexpr int kWantBuckets = 4;
constexpr double kLinkBoundFrac = 0.5;   // busbw / link at which the link is the limit
constexpr double kActivationFrac = 0.8;  // activation peak / memory limit
constexpr double kSpreadRatio = 1.2;     // p90 / p50
constexpr double kLowMfu = 0.4;
constexpr double kComputePct = 70;      // forward + backward + optimizer, % of step
constexpr int64_t kMinRows = 512;       // rows of a matrix product below which kernels starve
constexpr double kFarBelowBound = 0.1;  // an op at less than this of its roofline bound
constexpr double kOpSharePct = 10;      // ... that takes at least this much of the ops' time
constexpr double kMemoryBoundPct = 50;  // bandwidth-bound ops, % of the ops' time
constexpr double kStragglerFrac = 0.5;  // share of steps one rank is the slowest or named
constexpr double kDataPct = 5;
constexpr double kSkippedPct = 1;
constexpr double kSlowLinkRatio = 0.5;  // a link at most this fraction of every other rank's
constexpr double kAboveRate = 1.25;     // busbw above this x a link's rate: not its limit
constexpr double kRetransFrac = 0.01;   // TCP segments resent, share of those sent: loss
constexpr double kRetransRatio = 10;    // ... this many times the other rank's share

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string mib(double bytes) { return fmt("%.1f MiB", bytes / 1048576.0); }

// X rounded down to two significant digits (0.8372 -> 0.83).
double round_down_2sig(double x) {
  const double unit = std::pow(10.0, std::floor(std::log10(x)) - 1);
  return std::floor(x / unit) * unit;
}

std::string setting(const char* key, double v) { return key + fmt("=%g", v); }

bool is_product(Op op) {
  return op == Op::qkv || op == Op::attn_proj || op == Op::mlp_fc || op == Op::mlp_proj ||
         op == Op::lm_head || op == Op::attention;
}

struct Rules {
  ReportData& r;
  const Config* cfg;  // null without config.yaml

  void fire(const char* id, std::string evidence, std::string advice,
            std::vector<std::string> sets = {}) {
    r.findings.push_back({id, std::move(evidence), std::move(advice), std::move(sets)});
  }
  bool fired(const std::string& id) const {
    const std::vector<std::string> ids = r.fired();
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }
  // The rank a straggler rule would name, or -1.
  int straggler() const;
  void communication();
  void slow_link();
  bool slow_link_by_rate(const std::string& seen);
  bool slow_link_by_loss(const std::string& seen);
  void memory();
  void kernels();
  void slow_op();
  void memory_bound();
  void straggler_rule();
  void input_pipeline();
  void loss_scale();
};

// A rank named a straggler (busy time, GradSync) in most steady steps; else the rank
// slowest in most of them when the slowest step stands out.
int Rules::straggler() const {
  const std::vector<int>& named = r.comm.straggler_count;
  const auto top = std::max_element(named.begin(), named.end());
  if (top != named.end() && r.steady_steps > 0 && double(*top) / r.steady_steps > kStragglerFrac)
    return int(top - named.begin());
  if (r.slowest_rank >= 0 && r.slowest_frac > kStragglerFrac && r.max_over_median > kStragglerRatio)
    return r.slowest_rank;
  return -1;
}

}  // namespace

int gradient_buckets(const ModelConfig& m, double bucket_mb) {
  return int(make_buckets(GptSpec(m).bucket_units(), size_t(bucket_mb * 1048576.0)).size());
}

namespace {

// The largest comm.bucket_mb (two significant digits) that gives WANT buckets or more; the
// model's blocks are the finest grain, so WANT is at most n_layers + 1.
double bucket_mb_for(const ModelConfig& m, double grad_mib, int want) {
  want = std::min(want, m.n_layers + 1);
  for (double mb = grad_mib / want; mb > 1e-4; mb *= 0.9) {
    const double v = round_down_2sig(mb);
    if (gradient_buckets(m, v) >= want) return v;
  }
  return 0;
}

void Rules::communication() {
  const CommFacts& c = r.comm;
  // Waiting for a slower rank also shows as exposed comm: judge the rank that waited least.
  const double exposed = r.step_ms_p50 > 0 ? 100 * c.exposed_ms / r.step_ms_p50 : 0;
  const double overlap = std::isfinite(r.overlap) ? r.overlap : 0;
  const std::string seen =
      fmt("exposed communication %.1f%% of step (%.1f ms, the least of any rank, median over "
          "steps), comm in flight %.1f%%, overlap %.1f%%",
          exposed, c.exposed_ms, r.pct.comm, 100 * overlap);
  if (exposed < kCommCausePct) return;
  if (cfg && !cfg->comm.overlap) {
    fire("comm_overlap_off", seen + " with comm.overlap off",
         "every bucket waits for the end of backward: let buckets reduce while backward runs",
         {"comm.overlap=true"});
  } else if (cfg && overlap < kNoOverlap && c.buckets <= kFewBuckets) {
    const double mb = bucket_mb_for(cfg->model, c.grad_mib, kWantBuckets);
    fire("bucket_size",
         seen + fmt(": the %.2f MiB of gradients fit in %g bucket(s) of comm.bucket_mb = %g",
                    c.grad_mib, c.buckets, cfg->comm.bucket_mb),
         fmt("one bucket cannot start before backward ends; smaller buckets reduce the last "
             "blocks while backward computes the first: comm.bucket_mb = %g gives %g buckets",
             mb, gradient_buckets(cfg->model, mb)),
         {setting("comm.bucket_mb", mb)});
  } else if (overlap >= kGoodOverlap) {
    std::string link = c.link_gbs > 0 ? fmt(" = %.0f%% of the emulated link's %.3g GB/s",
                                            100 * c.busbw_gbs / c.link_gbs, c.link_gbs)
                                      : " (link not emulated: compare with `ringstep bench "
                                        "allreduce`)";
    const std::string evidence =
        seen + fmt(": achieved bus bandwidth %.3g GB/s", c.busbw_gbs) + link;
    if (cfg && c.link_gbs > 0 && c.busbw_gbs < kLinkBoundFrac * c.link_gbs) {
      fire("comm_bandwidth", evidence,
           "the reduction does not reach the link: its messages are too small for the "
           "per-message cost; larger buckets send fewer, longer messages",
           {setting("comm.bucket_mb", 2 * cfg->comm.bucket_mb)});
    } else if (cfg && cfg->optimizer.name == OptimizerKind::onebit_adam) {
      const int freeze = cfg->optimizer.onebit.freeze_step;
      fire("comm_bandwidth", evidence,
           "the link is the limit with 1-bit Adam already on: its compressed stage sends about "
           "1/32 of the bytes, so the exposed time is its full-precision warm-up (fewer "
           "warm-up steps) or the link's latency",
           {fmt("optimizer.onebit.freeze_step=%g", std::max(1, freeze / 2))});
    } else {
      fire("comm_bandwidth", evidence,
           "the link is the limit and overlap already hides what it can: send fewer bytes. "
           "1-bit Adam sends the sign of the momentum (about 1/32 of the bytes) after "
           "optimizer.onebit.freeze_step full-precision steps (docs/optim.md)",
           {"optimizer.name=onebit_adam"});
    }
  } else if (exposed > kExposedCommPct) {
    fire("comm_exposed",
         fmt("exposed communication %.1f%% of step > %.0f%% (", exposed, kExposedCommPct) + seen +
             ")",
         "no single cause: overlap is partial. Compare comm.bucket_mb" +
             (cfg ? fmt(" (now %g, %g buckets)", cfg->comm.bucket_mb, c.buckets) : "") +
             " with the link's speed (`ringstep bench allreduce`); 1-bit Adam "
             "(`optimizer.name: onebit_adam`) sends fewer bytes");
  }
}

// "rank 1" or "ranks 1, 3".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string gbit(double gbps) { return fmt("%g Gbit/s", gbps); }

// " rank 0 1658 of 42458 (3.91%)": the TCP segments rank K resent over the run.
std::string resent(int k, const RankLink& l) {
  return fmt(" rank %g %g of %g", k, double(l.tcp_retrans_segs), double(l.tcp_out_segs)) +
         fmt(" (%.2f%%)", 100.0 * double(l.tcp_retrans_segs) / double(l.tcp_out_segs));
}

// "; TCP segments resent over the run (...): rank 0 1658 of 42458 (3.91%), rank 1 0 of 47873
// (0.00%)", or "" when a rank's counters are unknown.
std::string retransmissions(const std::vector<RankLink>& links) {
  std::string s = "; TCP segments resent over the run (in each rank's network namespace):";
  for (size_t k = 0; k < links.size(); ++k) {
    const RankLink& l = links[k];
    if (l.tcp_out_segs <= 0 || l.tcp_retrans_segs < 0) return "";
    s += std::string(k ? "," : "") + resent(int(k), l);
  }
  return s;
}

// Every rank's link rate is known and one group of ranks has a link at most half as fast as
// every other rank's, whose rate the measured bus bandwidth matches: name those ranks.
bool Rules::slow_link_by_rate(const std::string& seen) {
  const std::vector<RankLink>& links = r.comm.links;
  double slowest = INFINITY;
  for (const RankLink& l : links) {
    if (!(l.rate_gbps > 0)) return false;
    slowest = std::min(slowest, l.rate_gbps);
  }
  std::vector<int> slow;
  double others_lo = INFINITY, others_hi = 0;
  for (size_t k = 0; k < links.size(); ++k) {
    const double rate = links[k].rate_gbps;
    if (rate == slowest) {
      slow.push_back(int(k));
    } else {
      others_lo = std::min(others_lo, rate), others_hi = std::max(others_hi, rate);
    }
  }
  if (slow.size() == links.size() || slowest > kSlowLinkRatio * others_lo) return false;
  // A 2-rank AllReduce's busbw is what each direction of a link carries; a ring's, what
  // each of its links carries (docs/metrics.md): at most the rate / 8 in GB/s.
  const double link_gbs = slowest / 8, busbw = r.comm.busbw_gbs;
  if (!(busbw >= kLinkBoundFrac * link_gbs && busbw <= kAboveRate * link_gbs)) return false;
  const RankLink& first = links[size_t(slow.front())];
  const bool one = slow.size() == 1;
  const std::string iface = first.interface.empty() ? "" : " (" + first.interface + ")";
  std::string what =
      (one ? ranks_text(slow) + "'s link" : "the links of " + ranks_text(slow)) + iface +
      (one ? " is " : " are ") +
      (first.capped
           ? "capped at " + gbit(slowest) + " by " + (one ? "its root qdisc" : "their root qdiscs")
           : "at " + gbit(slowest) + " (link speed)") +
      ", the others' at " +
      (others_hi > others_lo ? fmt("%g to %g Gbit/s", others_lo, others_hi) : gbit(others_lo));
  fire("slow_link",
       what +
           fmt("; measured busbw %.3g GB/s = %.0f%% of the %.3g GB/s it carries", busbw,
               100 * busbw / link_gbs, link_gbs) +
           " (" + seen + ")" + retransmissions(links),
       "the exchange runs at the slowest link's rate, so every rank waits for " + ranks_text(slow) +
           ": check that host's link (its negotiated speed: ethtool; a rate limit: tc qdisc "
           "show dev" +
           (first.interface.empty() ? std::string(" IF") : " " + first.interface) +
           "; the cable and the switch port), or run without that host");
  return true;
}

// With 2 ranks, where the rates name no rank: one rank resent a share of its TCP segments
// and the other almost none. A host whose link is slower queues its own sends at its
// interface and loses none, while what the other sends it is dropped on the way in and
// resent: name the rank that did not resend.
bool Rules::slow_link_by_loss(const std::string& seen) {
  const std::vector<RankLink>& links = r.comm.links;
  if (links.size() != 2 || retransmissions(links).empty()) return false;
  const auto frac = [&](int k) {
    return double(links[size_t(k)].tcp_retrans_segs) / double(links[size_t(k)].tcp_out_segs);
  };
  const int lossy = frac(0) >= frac(1) ? 0 : 1, other = 1 - lossy;
  if (frac(lossy) < kRetransFrac || frac(other) * kRetransRatio > frac(lossy)) return false;
  const std::string iface =
      links[size_t(other)].interface.empty() ? "" : " (" + links[size_t(other)].interface + ")";
  fire("slow_link",
       fmt("rank %g's link", other) + iface + fmt(" loses what rank %g sends it:", lossy) +
           resent(lossy, links[size_t(lossy)]) + " TCP segments resent, against" +
           resent(other, links[size_t(other)]) +
           (r.comm.busbw_gbs > 0 ? fmt("; measured busbw %.3g GB/s", r.comm.busbw_gbs) : "") +
           " (" + seen + ")",
       "a host whose link is slower queues its own sends and loses none, while what the "
       "other sends it is dropped on the way in: a link into rank " +
           std::to_string(other) + " slower than rank " + std::to_string(lossy) +
           "'s, or a lossy one. Check that host's link (its negotiated speed: ethtool; a rate "
           "limit: tc qdisc; the cable and the switch port)");
  return true;
}

// A slow exchange explained by one rank's link, from the ranks' network facts.
void Rules::slow_link() {
  const CommFacts& c = r.comm;
  if (r.world < 2 || int(c.links.size()) != r.world || r.step_ms_p50 <= 0) return;
  const double exposed = 100 * c.exposed_ms / r.step_ms_p50;
  if (exposed < kCommCausePct) return;
  const std::string seen = fmt("exposed communication %.1f%% of step", exposed);
  if (!slow_link_by_rate(seen)) slow_link_by_loss(seen);
}

void Rules::memory() {
  if (r.memory_limit_bytes <= 0) return;
  const double peak = double(r.activations_peak_bytes), limit = r.memory_limit_bytes;
  if (peak <= kActivationFrac * limit) return;
  std::vector<std::string> sets;
  std::string advice;
  if (cfg && cfg->recompute.policy != RecomputePolicy::full) {
    // The policy whose estimate, scaled to the measured peak, fits; full if none does.
    Config c = *cfg;
    const double now = activation_estimate_bytes(c);
    RecomputePolicy pick = RecomputePolicy::full;
    c.recompute.policy = RecomputePolicy::selective;
    if (cfg->recompute.policy == RecomputePolicy::none && now > 0 &&
        peak * activation_estimate_bytes(c) / now < kActivationFrac * limit)
      pick = RecomputePolicy::selective;
    sets = {std::string("recompute.policy=") + name(pick)};
    advice = std::string("rebuild activations in backward instead of keeping them (now ") +
             name(cfg->recompute.policy) + ")";
  } else if (cfg && cfg->train.micro_batch % 2 == 0) {
    sets = {setting("train.micro_batch", cfg->train.micro_batch / 2.0),
            setting("train.grad_accum_steps", cfg->train.grad_accum_steps * 2.0)};
    advice =
        "recomputation is already full: halve the micro-batch and accumulate twice as "
        "many (same global batch)";
  } else {
    advice =
        "turn on `recompute.policy: full`, or a smaller `train.micro_batch` with more "
        "`train.grad_accum_steps`";
  }
  fire("activation_memory",
       "activation peak " + mib(peak) + " = " + fmt("%.1f%%", 100 * peak / limit) + " of " +
           mib(limit) +
           (cfg && cfg->run.memory_limit_mb > 0 ? std::string(" (run.memory_limit_mb)")
                                                : fmt(" (physical RAM / world %g)", r.world)) +
           fmt(" > %.0f%%", 100 * kActivationFrac),
       advice, sets);
}

// The matrix products' own throughput, from the measured roofline ("" without ops).
std::string products_rate(const ReportData& r) {
  double flops = 0, ms = 0;
  for (const OpRow& o : r.ops)
    if (is_product(o.op)) flops += o.flops, ms += o.ms;
  return ms > 0 ? fmt("; the matrix products run at %.1f GFLOP/s", flops / (ms * 1e6)) : "";
}

void Rules::kernels() {
  if (r.peak_gflops <= 0 || r.mfu >= kLowMfu || r.pct.compute <= kComputePct) return;
  const std::string seen =
      fmt("MFU %.1f%% < %.0f%% while compute (forward + backward + optimizer) is %.1f%% of "
          "step > %.0f%%",
          100 * r.mfu, 100 * kLowMfu, r.pct.compute, kComputePct) +
      products_rate(r) + fmt(" against a peak of %.1f", r.peak_gflops);
  const int64_t rows = cfg ? int64_t(cfg->train.micro_batch) * cfg->model.seq_len : 0;
  if (!cfg || rows >= kMinRows) {
    fire("kernels", seen,
         "the time goes to the kernels: check the BLAS in use and its threads, `run.threads`, "
         "a -march=native build; the measured roofline shows which op is furthest from its "
         "bound");
    return;
  }
  // Grow the micro-batch by K and accumulate K times fewer: the same global batch.
  const int accum = cfg->train.grad_accum_steps;
  int k = int((kMinRows + rows - 1) / rows);
  if (accum > 1) {
    k = std::min(k, accum);
    while (accum % k != 0) --k;
  }
  const int k_used = std::max(k, 2);
  fire("micro_batch",
       seen + fmt(", and a matrix product has only micro_batch x seq_len = %g rows (< %g)",
                  double(rows), double(kMinRows)),
       accum % k_used == 0
           ? "each product is too small to keep the cores busy: a larger micro-batch with "
             "fewer accumulation steps keeps the global batch"
           : "each product is too small to keep the cores busy: a larger micro-batch (the "
             "global batch grows: revisit train.lr)",
       {setting("train.micro_batch", cfg->train.micro_batch * double(k_used)),
        setting("train.grad_accum_steps", std::max(1, accum / k_used))});
}

void Rules::slow_op() {
  if (fired("micro_batch")) return;  // the batch, not the op
  const OpRow* worst = nullptr;
  for (const OpRow& o : r.ops)
    if (o.bound_ms > 0 && o.share_pct >= kOpSharePct &&
        (!worst || o.bound_frac < worst->bound_frac))
      worst = &o;
  if (!worst || worst->bound_frac >= kFarBelowBound) return;
  const OpRow& o = *worst;
  std::vector<std::string> sets;
  std::string advice =
      std::string("optimise ") + name(o.op) + " first: it is the op furthest below its bound";
  if (cfg && cfg->precision.dtype == DType::f32 && is_product(o.op)) {
    sets = {"precision.dtype=bf16"};
    advice += "; in bf16 products and attention run on the 16-bit kernels (docs/perf.md)";
  }
  fire("slow_op",
       std::string(name(o.phase)) + " " + name(o.op) +
           fmt(" takes %.1f%% of the ops' time (%.2f ms per step) at %.1f%% of its roofline "
               "bound (%.3f ms)",
               o.share_pct, o.ms, 100 * o.bound_frac, o.bound_ms) +
           fmt(": %.1f GFLOP/s, %.2f GB/s, ", o.gflops, o.gbs) + o.bound + "-bound",
       advice, sets);
}

void Rules::memory_bound() {
  if (fired("micro_batch")) return;
  double pct = 0;
  std::string which;
  for (const OpRow& o : r.ops) {
    if (o.bound != "bandwidth") continue;
    pct += o.share_pct;
    if (o.share_pct >= 5)
      which += std::string(which.empty() ? "" : ", ") + name(o.phase) + " " + name(o.op);
  }
  if (pct <= kMemoryBoundPct) return;
  const bool fp32 = cfg && cfg->precision.dtype == DType::f32;
  fire("memory_bound",
       fmt("bandwidth-bound ops take %.1f%% of the ops' time > %.0f%%", pct, kMemoryBoundPct) +
           (which.empty() ? "" : " (" + which + ")"),
       std::string("the step moves memory more than it computes: fuse element-wise ops into "
                   "their neighbours (one pass instead of several)") +
           (fp32 ? "; 16-bit activations halve the bytes" : ""),
       fp32 ? std::vector<std::string>{"precision.dtype=bf16"} : std::vector<std::string>{});
}

void Rules::straggler_rule() {
  const int rank = straggler();
  if (rank < 0) return;
  const CommFacts& c = r.comm;
  const int named = c.straggler_count.empty() ? 0 : c.straggler_count[size_t(rank)];
  std::string evidence =
      named > 0 ? fmt("rank %g was named a straggler in %g of %g steady steps (%.1f%%)", rank,
                      named, r.steady_steps, 100.0 * named / std::max(1, r.steady_steps))
                : fmt("rank %g was the slowest in %g of %g steady steps (%.1f%%)", rank,
                      r.slowest_count[size_t(rank)], r.steady_steps, 100 * r.slowest_frac) +
                      fmt(" > %.0f%%, median step max/median %.3f > %.2f", 100 * kStragglerFrac,
                          r.max_over_median, kStragglerRatio);
  if (c.busy_ms_median > 0)
    evidence += fmt(": busy %.1f ms per step against the median rank's %.1f ms (+%.0f%%)",
                    c.busy_ms_max, c.busy_ms_median, 100 * (c.busy_ms_max / c.busy_ms_median - 1));
  std::string advice =
      fmt("rank %g is a straggler and every other rank waits for it in the reduction: check its "
          "host (load, CPU frequency, thread count, binding) and its link",
          rank);
  std::vector<std::string> sets;
  if (cfg && cfg->profile.inject_delay_ms > 0 && rank == r.world - 1) {
    advice += fmt("; this run injects %g ms per step on it (profile.inject_delay_ms, a test knob)",
                  cfg->profile.inject_delay_ms);
    sets = {"profile.inject_delay_ms=0"};
  }
  fire("straggler", evidence, advice, sets);
}

void Rules::input_pipeline() {
  if (r.pct.data <= kDataPct) return;
  std::string advice =
      "the input pipeline is on the critical path: tokenize ahead (`ringstep prepare`), "
      "read from a local disk, or prefetch the next batch";
  std::vector<std::string> sets;
  if (cfg && cfg->profile.inject_data_delay_ms > 0) {
    advice +=
        fmt("; this run injects %g ms per micro-batch (profile.inject_data_delay_ms, a "
            "test knob)",
            cfg->profile.inject_data_delay_ms);
    sets = {"profile.inject_data_delay_ms=0"};
  }
  fire("input_pipeline", fmt("data %.1f%% of step > %.0f%%", r.pct.data, kDataPct), advice, sets);
}

void Rules::loss_scale() {
  if (r.skipped_pct <= kSkippedPct) return;
  std::string advice = "the loss scale overflows too often";
  std::vector<std::string> sets;
  if (cfg && cfg->precision.dtype == DType::f16) {
    advice +=
        ": bf16 has fp32's exponent range and needs no loss scaling; to stay in fp16, "
        "a lower `precision.loss_scale.initial` and a longer `growth_interval`" +
        fmt(" (now %g and %g)", cfg->precision.loss_scale.initial,
            cfg->precision.loss_scale.growth_interval);
    sets = {"precision.dtype=bf16"};
  } else {
    advice += ": a lower `precision.loss_scale.initial`, a longer `growth_interval`";
  }
  fire("loss_scale",
       fmt("%g of %g steps skipped (%.1f%%) > %.0f%%", r.skipped_steps, r.steps, r.skipped_pct,
           kSkippedPct),
       advice, sets);
}

}  // namespace

void run_rules(ReportData& r) {
  Rules rules{r, r.has_config ? &r.config : nullptr};
  rules.communication();
  rules.slow_link();
  rules.memory();
  if (r.step_ms_p50 > 0 && r.step_ms_p90 / r.step_ms_p50 > kSpreadRatio)
    rules.fire("step_spread",
               fmt("p90/p50 = %.2f (p50 %.1f ms, p90 %.1f ms) > %.1f",
                   r.step_ms_p90 / r.step_ms_p50, r.step_ms_p50, r.step_ms_p90, kSpreadRatio),
               "step times vary: look for stragglers (the ranks line), noisy neighbours on the "
               "same cores (ranks x threads > cores?), or inputs that change shape");
  rules.kernels();
  rules.slow_op();
  rules.memory_bound();
  rules.straggler_rule();
  rules.input_pipeline();
  rules.loss_scale();
}

}  // namespace ringstep
