// The two renderings of a ReportData (text for a person, one JSON object for a script) and
// the `ringstep report` entry point.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/threads.h"
#include "train/report.h"
#include "train/run_summary.h"

namespace ringstep {
// 1234 -> "1.2k", 10.75e6 -> "10.75M".
std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  else if (x >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::string human_bytes(double bytes) {
  constexpr double kMiB = 1048576.0, kGiB = 1073741824.0;
  char buf[48];
  if (bytes >= kGiB)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / kMiB);
  return buf;
}

namespace {

using ojson = nlohmann::ordered_json;

// Unknown numbers (NaN, or 0 where 0 means "not measured") are null in JSON.
ojson known(double x) { return std::isfinite(x) ? ojson(x) : ojson(nullptr); }
ojson positive(double x) { return x > 0 ? ojson(x) : ojson(nullptr); }

class Text {
 public:
  void line(const char* f, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap, again;
    va_start(ap, f);
    va_copy(again, ap);
    const int n = std::vsnprintf(nullptr, 0, f, ap);
    va_end(ap);
    const size_t at = s_.size();
    s_.resize(at + size_t(n) + 1);
    std::vsnprintf(s_.data() + at, size_t(n) + 1, f, again);
    va_end(again);
    s_.back() = '\n';  // over the terminating NUL
  }
  std::string str() const { return s_; }

 private:
  std::string s_;
};

double mib(double bytes) { return bytes / 1048576.0; }

std::string plural(long long n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void print_time(const ReportData& r, Text& t) {
  t.line("step time    p50 %.1f ms | p90 %.1f ms | p99 %.1f ms | spread (p90-p50)/p50 %.1f%%",
         r.step_ms_p50, r.step_ms_p90, r.step_ms_p99, 100 * r.spread);
  const StepShares& p = r.pct;
  t.line("breakdown    %% of step, summed over the %d steady steps", r.steady_steps);
  t.line("  data          %5.1f%%", p.data);
  t.line("  forward       %5.1f%%", p.forward);
  t.line("  backward      %5.1f%%   (recompute %.1f%% of backward)", p.backward,
         p.recompute_of_backward);
  t.line("  optimizer     %5.1f%%", p.optimizer);
  t.line("  comm exposed  %5.1f%%", p.comm_exposed);
  t.line("  other         %5.1f%%", p.other);
  if (std::isfinite(r.overlap))
    t.line("  comm in flight %4.1f%%   overlap %.1f%% (1 - exposed/comm)", p.comm, 100 * r.overlap);
  else
    t.line("  comm in flight %4.1f%%   overlap n/a (nothing communicated)", p.comm);
  char end[96] = "";
  if (r.peak_gflops_end > 0 && r.peak_gflops > 0 && r.peak_gflops_end != r.peak_gflops)
    std::snprintf(end, sizeof end, " (%.1f measured at the end, %+.0f%%)", r.peak_gflops_end,
                  100 * (r.peak_gflops_end / r.peak_gflops - 1));
  t.line(
      "throughput   %s tokens/s at p50 (%.0f tokens/step) | model %.1f GFLOP/s/rank | peak "
      "%.1f GFLOP/s/rank%s | MFU %.1f%%",
      human_count(r.tokens_per_s).c_str(), r.tokens_per_step, r.model_gflops, r.peak_gflops, end,
      100 * r.mfu);
  t.line("skipped      %d of %d steps (%.1f%%)", r.skipped_steps, r.steps, r.skipped_pct);
  if (r.plan.known)
    t.line(
        "plan         predicted %.1f ms per step (compute %.1f, exposed comm %.1f) vs %.1f ms "
        "measured (%+.0f%%): ringstep plan --check (docs/plan.md)",
        r.plan.step_ms, r.plan.compute_ms, r.plan.comm_exposed_ms, r.plan.measured_step_ms,
        r.plan.measured_step_ms > 0 ? 100 * (r.plan.step_ms / r.plan.measured_step_ms - 1) : 0);
}

// The gradient buckets of the config and what the reduction achieved: the records'
// comm_busbw_gbs (nccl-tests' busbw, train/step_record.h), median over the steady steps.
void print_comm(const ReportData& r, Text& t) {
  const CommFacts& c = r.comm;
  char buf[200];
  std::string line = "comm         ";
  if (r.has_config) {
    std::snprintf(buf, sizeof buf, "%s of <= %g MiB (comm.bucket_mb) for %.2f MiB of gradients",
                  plural(c.buckets, "bucket").c_str(), r.config.comm.bucket_mb, c.grad_mib);
    line += buf;
  } else {
    line += "buckets unknown (no config.yaml)";
  }
  if (r.world <= 1) {
    t.line("%s | 1 rank: nothing communicated", line.c_str());
    return;
  }
  if (c.busbw_gbs > 0)
    std::snprintf(buf, sizeof buf, " | bus bandwidth %.3g GB/s (busbw, median)", c.busbw_gbs);
  else
    std::snprintf(buf, sizeof buf, " | bus bandwidth unknown (no comm_busbw_gbs in the records)");
  line += buf;
  if (c.link_gbs > 0 && c.busbw_gbs > 0) {
    std::snprintf(buf, sizeof buf, ", %.0f%% of the emulated link's %.3g GB/s",
                  100 * c.busbw_gbs / c.link_gbs, c.link_gbs);
    line += buf;
  }
  std::snprintf(buf, sizeof buf, " | exposed %.1f ms/step (least-waiting rank, median)",
                c.exposed_ms);
  t.line("%s%s", line.c_str(), buf);
}

// A counter for people: "1.7k", "?" when unknown.
std::string count_text(int64_t n) { return n >= 0 ? human_count(double(n)) : "?"; }
std::string gbps_text(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::isfinite(gbps) ? "%g Gbit/s" : "?", gbps);
  return buf;
}

// Each rank's link (summary.json's network facts): interface, speed, cap, and its counters
// over the run.
void print_network(const ReportData& r, Text& t) {
  const std::vector<RankLink>& links = r.comm.links;
  if (links.empty()) return;
  if (std::all_of(links.begin(), links.end(),
                  [](const RankLink& l) { return l.interface.empty(); })) {
    t.line("network      no network between the ranks (every rank on one host)");
    return;
  }
  constexpr size_t kShown = 8;
  for (size_t k = 0; k < std::min(links.size(), kShown); ++k) {
    const RankLink& l = links[k];
    const char* head = k == 0 ? "network      " : "             ";
    if (l.interface.empty()) {
      t.line("%srank %zu: no network to the other ranks", head, k);
      continue;
    }
    std::string cap = l.cap_gbps > 0    ? "root qdisc caps it at " + gbps_text(l.cap_gbps)
                      : l.cap_gbps == 0 ? "no rate cap"
                                        : "rate cap unknown";
    std::string resent = "?";
    if (l.tcp_out_segs > 0 && l.tcp_retrans_segs >= 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s of %s (%.2f%%)", count_text(l.tcp_retrans_segs).c_str(),
                    count_text(l.tcp_out_segs).c_str(),
                    100.0 * double(l.tcp_retrans_segs) / double(l.tcp_out_segs));
      resent = buf;
    }
    t.line(
        "%srank %zu: %s, link %s, %s | over the run: TCP segments resent %s | tx %sB rx %sB, "
        "dropped %s, errors %s",
        head, k, l.interface.c_str(), gbps_text(l.link_gbps).c_str(), cap.c_str(), resent.c_str(),
        count_text(l.tx_bytes).c_str(), count_text(l.rx_bytes).c_str(),
        count_text(l.dropped).c_str(), count_text(l.errors).c_str());
  }
  if (links.size() > kShown)
    t.line("             ... %zu more ranks in the JSON report", links.size() - kShown);
}

// 1-bit Adam's two stages side by side (docs/optim.md).
void print_onebit(const ReportData& r, Text& t) {
  if (!r.onebit) return;
  for (size_t k = 0; k < r.onebit_stages.size(); ++k) {
    const OneBitStageStats& s = r.onebit_stages[k];
    if (s.steps == 0) continue;
    const bool zero_one = r.has_config && r.config.optimizer.name == OptimizerKind::zero_one_adam;
    std::string line = std::string(zero_one ? "0/1 Adam     " : "1-bit Adam   ") +
                       name(OneBitStage(k)) + ": " + plural(s.steps, "step") + ", step p50 ";
    char buf[160];
    std::snprintf(buf, sizeof buf, "%.1f ms, sent %sB/rank/step", s.step_ms_p50,
                  human_count(s.sent_bytes_p50).c_str());
    line += buf;
    if (std::isfinite(s.compression_error_p50)) {
      std::snprintf(buf, sizeof buf, ", compression error p50 %.3f", s.compression_error_p50);
      line += buf;
    }
    t.line("%s", line.c_str());
  }
  if (std::isfinite(r.onebit_volume_ratio))
    t.line("             compressed / warm-up bytes sent: 1/%.1f", 1 / r.onebit_volume_ratio);
  if (r.compress_choice) t.line("             %s", r.compress_choice->describe().c_str());
  t.line("             bytes sent over the run: %sB/rank",
         human_count(r.onebit_sent_bytes).c_str());
}

void print_loss_memory_ranks(const ReportData& r, Text& t) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "loss         final %.4f", r.final_loss);
  std::string loss = buf;
  if (std::isfinite(r.final_val_loss)) {
    std::snprintf(buf, sizeof buf, " | val %.4f", r.final_val_loss);
    loss += buf;
  }
  if (std::isfinite(r.entropy_floor)) {
    std::snprintf(buf, sizeof buf, " | floor %.4f | gap %.4f nats (%s - floor)", r.entropy_floor,
                  r.loss_gap, std::isfinite(r.final_val_loss) ? "val" : "final");
    loss += buf;
  } else {
    loss += " | floor unknown (not synthetic data)";
  }
  t.line("%s", loss.c_str());

  t.line(
      "memory       params %.2f MiB | grads %.2f MiB | optimizer %.2f MiB | activations peak "
      "%.2f MiB",
      mib(double(r.params_bytes)), mib(double(r.grads_bytes)), mib(double(r.optimizer_bytes)),
      mib(double(r.activations_peak_bytes)));
  if (r.activations_estimate_bytes > 0)
    t.line("             the model spec's arena peak for the config (%s, recompute %s): %.2f MiB",
           name(r.config.precision.dtype), name(r.config.recompute.policy),
           mib(r.activations_estimate_bytes));
  if (r.memory_limit_bytes > 0)
    t.line("             limit %.2f GiB/rank (physical RAM / %s): activations %.1f%% of it",
           r.memory_limit_bytes / 1073741824.0, plural(r.world, "rank").c_str(),
           100 * double(r.activations_peak_bytes) / r.memory_limit_bytes);

  if (r.slowest_rank < 0) {
    t.line("ranks        %s: nothing to compare", plural(r.world, "rank").c_str());
    return;
  }
  // Ranks by how often they were the slowest, most often first.
  std::vector<int> order;
  for (size_t k = 0; k < r.slowest_count.size(); ++k)
    if (r.slowest_count[k] > 0) order.push_back(int(k));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return r.slowest_count[size_t(a)] > r.slowest_count[size_t(b)];
  });
  std::string who;
  for (int k : order) {
    std::snprintf(buf, sizeof buf, "%srank %d in %d", who.empty() ? "" : ", ", k,
                  r.slowest_count[size_t(k)]);
    who += buf;
  }
  t.line(
      "ranks        %d; slowest: %s of %d steady steps | step max/median %.3f (median over "
      "steps)",
      r.world, who.c_str(), r.steady_steps, r.max_over_median);
}

void print_roofline(const ReportData& r, Text& t) {
  if (!r.has_config) {
    t.line("roofline     no config.yaml: model shapes unknown");
    return;
  }
  const MachineInfo& m = r.machine;
  t.line("roofline     forward matrix products, fp32, N = micro_batch x seq_len = %lld rows",
         (long long)r.roofline_rows);
  if (r.machine_balance > 0) {
    t.line(
        "             peak %.1f GFLOP/s/rank / bandwidth %.1f GB/s (triad, 64 MiB arrays, "
        "best of 5, %s on this machine) = balance %.1f FLOP/byte",
        r.peak_gflops, m.mem_bandwidth_gbs, plural(m.bandwidth_threads, "thread").c_str(),
        r.machine_balance);
    t.line("             a product below the balance (FLOP/byte) is bandwidth-bound");
  } else {
    t.line("             machine balance unknown (no peak or no bandwidth measurement)");
  }
  t.line("  %-10s %20s %10s %11s %10s %12s  %s", "product", "M x K x N", "per fwd", "MFLOP",
         "FLOP/byte", "attain GF/s", "bound");
  for (const RooflineRow& row : r.roofline) {
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)row.m, (long long)row.k,
                  (long long)row.n);
    t.line("  %-10s %20s %10lld %11.2f %10.2f %12.1f  %s", row.name.c_str(), shape,
           (long long)row.count, row.flops / 1e6, row.intensity, row.attainable_gflops,
           row.bound.c_str());
  }
}

// The measured roofline: each op's time per op-timed step, longest first, what it achieved
// and the fraction of the time its bound allows; then the ops furthest below their bound.
void print_measured_roofline(const ReportData& r, Text& t) {
  if (r.ops.empty()) {
    t.line("measured     no op timings in the records (profile.op_every, or an older run)");
    return;
  }
  t.line(
      "measured     roofline per op: rank 0, mean of %s (profile.op_every); bound = "
      "max(FLOPs / peak, bytes / bandwidth)",
      plural(r.op_steps, "op-timed step").c_str());
  t.line("  %-9s %-13s %6s %9s %6s %9s %7s %9s  %-9s %7s", "phase", "op", "calls", "ms/step",
         "% ops", "GFLOP/s", "GB/s", "FLOP/byte", "bound", "% bound");
  for (const OpRow& o : r.ops) {
    char frac[16] = "?";
    if (o.bound_ms > 0) std::snprintf(frac, sizeof frac, "%.1f", 100 * o.bound_frac);
    t.line("  %-9s %-13s %6.0f %9.3f %6.1f %9.1f %7.2f %9.2f  %-9s %7s", name(o.phase), name(o.op),
           o.calls, o.ms, o.share_pct, o.gflops, o.gbs, o.intensity, o.bound.c_str(), frac);
  }
  // The seed's "where to optimise first": ops worth >= 2% of the time, least efficient first.
  std::vector<const OpRow*> worst;
  for (const OpRow& o : r.ops)
    if (o.bound_ms > 0 && o.share_pct >= 2) worst.push_back(&o);
  std::sort(worst.begin(), worst.end(),
            [](const OpRow* a, const OpRow* b) { return a->bound_frac < b->bound_frac; });
  std::string names;
  for (size_t i = 0; i < std::min<size_t>(3, worst.size()); ++i) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %s (%.1f%% of bound, %.1f%% of the time)", i ? "; " : "",
                  name(worst[i]->phase), name(worst[i]->op), 100 * worst[i]->bound_frac,
                  worst[i]->share_pct);
    names += buf;
  }
  if (!names.empty()) t.line("  furthest below their bound: %s", names.c_str());
}

void print_diagnosis(const ReportData& r, Text& t) {
  t.line("diagnosis");
  if (r.findings.empty()) {
    t.line("  no rule fired: the step looks healthy (rules and thresholds: docs/logs.md)");
    return;
  }
  for (const Finding& f : r.findings) {
    t.line("  [%s] %s", f.id.c_str(), f.evidence.c_str());
    t.line("      -> %s", f.advice.c_str());
    std::string sets;
    for (const std::string& kv : f.sets) sets += " --set " + kv;
    if (!sets.empty()) t.line("      try:%s", sets.c_str());
  }
}

}  // namespace

std::string report_text(const ReportData& r) {
  Text t;
  t.line("ringstep report: %s", r.run_dir.c_str());
  t.line(
      "  %s, %s x %s; steady state: steps %d..%d (the first %s excluded as "
      "warm-up: max(1, min(5, steps/10)))",
      plural(r.steps, "step").c_str(), plural(r.world, "rank").c_str(),
      r.threads > 0 ? plural(r.threads, "thread").c_str() : "? threads", r.first_steady_step,
      r.last_step, plural(r.warmup_excluded, "step").c_str());
  print_time(r, t);
  print_comm(r, t);
  print_network(r, t);
  print_onebit(r, t);
  print_loss_memory_ranks(r, t);
  print_roofline(r, t);
  print_measured_roofline(r, t);
  print_diagnosis(r, t);
  return t.str();
}

std::string report_json(const ReportData& r) {
  const StepShares& p = r.pct;
  ojson j;
  j["run_dir"] = r.run_dir;
  j["steps"] = r.steps;
  j["warmup_steps_excluded"] = r.warmup_excluded;
  j["steady_steps"] = r.steady_steps;
  j["world"] = r.world;
  j["threads"] = r.threads > 0 ? ojson(r.threads) : ojson(nullptr);
  j["step_ms"] = {
      {"p50", r.step_ms_p50}, {"p90", r.step_ms_p90}, {"p99", r.step_ms_p99}, {"spread", r.spread}};
  j["breakdown_pct"] = {{"data", p.data},
                        {"forward", p.forward},
                        {"backward", p.backward},
                        {"recompute", p.recompute},
                        {"recompute_of_backward", p.recompute_of_backward},
                        {"optimizer", p.optimizer},
                        {"comm_exposed", p.comm_exposed},
                        {"other", p.other},
                        {"comm", p.comm},
                        {"compute", p.compute}};
  j["overlap"] = known(r.overlap);
  j["throughput"] = {{"tokens_per_step", r.tokens_per_step},
                     {"tokens_per_s", r.tokens_per_s},
                     {"model_gflops", r.model_gflops},
                     {"peak_gflops", positive(r.peak_gflops)},
                     {"peak_gflops_end", positive(r.peak_gflops_end)},
                     {"mfu", r.peak_gflops > 0 ? ojson(r.mfu) : ojson(nullptr)}};
  j["skipped"] = {{"steps", r.skipped_steps}, {"pct", r.skipped_pct}};
  if (r.plan.known)
    j["plan"] = {{"step_ms", r.plan.step_ms},
                 {"compute_ms", r.plan.compute_ms},
                 {"comm_exposed_ms", r.plan.comm_exposed_ms},
                 {"measured_step_ms", r.plan.measured_step_ms}};
  if (r.onebit) {
    ojson ob;
    for (size_t k = 0; k < r.onebit_stages.size(); ++k) {
      const OneBitStageStats& s = r.onebit_stages[k];
      if (s.steps == 0 && k > size_t(OneBitStage::compressed)) continue;  // 0/1 Adam's only
      ob[name(OneBitStage(k))] = {{"steps", s.steps},
                                  {"step_ms_p50", s.step_ms_p50},
                                  {"sent_bytes_p50", s.sent_bytes_p50},
                                  {"compression_error_p50", known(s.compression_error_p50)}};
    }
    ob["volume_ratio"] = known(r.onebit_volume_ratio);
    ob["compress_choice"] = r.compress_choice ? to_json(*r.compress_choice) : ojson(nullptr);
    ob["sent_bytes"] = r.onebit_sent_bytes;
    j["onebit"] = ob;
  }
  j["loss"] = {{"final", r.final_loss},
               {"val", known(r.final_val_loss)},
               {"floor", known(r.entropy_floor)},
               {"gap", known(r.loss_gap)}};
  j["ranks"] = {{"slowest_count", r.slowest_count},
                {"slowest_rank", r.slowest_rank >= 0 ? ojson(r.slowest_rank) : ojson(nullptr)},
                {"slowest_frac", r.slowest_frac},
                {"max_over_median", r.max_over_median}};
  j["memory"] = {{"params_bytes", r.params_bytes},
                 {"grads_bytes", r.grads_bytes},
                 {"optimizer_bytes", r.optimizer_bytes},
                 {"activations_peak_bytes", r.activations_peak_bytes},
                 {"activations_estimate_bytes", positive(r.activations_estimate_bytes)},
                 {"limit_bytes", positive(r.memory_limit_bytes)}};
  j["machine"] = {
      {"mem_bandwidth_gbs", positive(r.machine.mem_bandwidth_gbs)},
      {"bandwidth_threads",
       r.machine.bandwidth_threads > 0 ? ojson(r.machine.bandwidth_threads) : ojson(nullptr)},
      {"ram_bytes", positive(r.machine.ram_bytes)},
      {"balance_flop_per_byte", positive(r.machine_balance)}};
  ojson products = ojson::array();
  for (const RooflineRow& row : r.roofline)
    products.push_back({{"name", row.name},
                        {"m", row.m},
                        {"k", row.k},
                        {"n", row.n},
                        {"count", row.count},
                        {"flops", row.flops},
                        {"bytes", row.bytes},
                        {"intensity", row.intensity},
                        {"attainable_gflops", positive(row.attainable_gflops)},
                        {"bound", row.bound}});
  j["roofline"] = {{"rows", r.has_config ? ojson(r.roofline_rows) : ojson(nullptr)},
                   {"products", products}};
  ojson ops = ojson::array();
  for (const OpRow& o : r.ops)
    ops.push_back({{"phase", name(o.phase)},
                   {"op", name(o.op)},
                   {"calls", o.calls},
                   {"ms", o.ms},
                   {"share_pct", o.share_pct},
                   {"flops", o.flops},
                   {"bytes", o.bytes},
                   {"gflops", o.gflops},
                   {"gbs", o.gbs},
                   {"intensity", o.intensity},
                   {"bound", o.bound},
                   {"bound_ms", positive(o.bound_ms)},
                   {"bound_frac", o.bound_ms > 0 ? ojson(o.bound_frac) : ojson(nullptr)}});
  j["measured_roofline"] = {{"op_steps", r.op_steps}, {"ops", ops}};
  const CommFacts& c = r.comm;
  j["comm"] = {{"buckets", r.has_config ? ojson(c.buckets) : ojson(nullptr)},
               {"grad_mib", positive(c.grad_mib)},
               {"exposed_ms", c.exposed_ms},
               {"busbw_gbs", positive(c.busbw_gbs)},
               {"link_gbs", positive(c.link_gbs)},
               {"straggler_count", c.straggler_count},
               {"busy_ms_max", positive(c.busy_ms_max)},
               {"busy_ms_median", positive(c.busy_ms_median)}};
  const auto counter = [](int64_t n) { return n >= 0 ? ojson(n) : ojson(nullptr); };
  ojson links = ojson::array();
  for (const RankLink& l : c.links)
    links.push_back({{"interface", l.interface.empty() ? ojson(nullptr) : ojson(l.interface)},
                     {"link_gbps", known(l.link_gbps)},
                     {"cap_gbps", known(l.cap_gbps)},
                     {"rate_gbps", known(l.rate_gbps)},
                     {"tcp_out_segs", counter(l.tcp_out_segs)},
                     {"tcp_retrans_segs", counter(l.tcp_retrans_segs)},
                     {"tx_bytes", counter(l.tx_bytes)},
                     {"rx_bytes", counter(l.rx_bytes)},
                     {"dropped", counter(l.dropped)},
                     {"errors", counter(l.errors)}});
  j["network"] = links;
  ojson diag = ojson::array();
  for (const Finding& f : r.findings)
    diag.push_back({{"id", f.id}, {"evidence", f.evidence}, {"advice", f.advice}, {"try", f.sets}});
  j["diagnosis"] = diag;
  j["healthy"] = r.findings.empty();
  j["warnings"] = r.warnings;
  return j.dump(2) + "\n";
}

int run_report(const std::string& run_dir, bool json_out) {
  // A first pass fails fast on bad input and says how many threads the run used, which
  // the bandwidth measurement should match.
  const ReportData first = analyze(run_dir);
  const ReportData r =
      analyze(run_dir, measure_machine(std::min(first.threads, hardware_threads())));
  for (const std::string& w : r.warnings)
    std::fprintf(stderr, "ringstep report: warning: %s\n", w.c_str());
  const std::string out = json_out ? report_json(r) : report_text(r);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace ringstep
