#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/profiler.h"
#include "core/stats.h"
#include "models/gpt.h"
#include "train/plan.h"
#include "train/run_summary.h"
#include "train/step_record.h"

namespace ringstep {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr size_t kMaxSummaryBytes = size_t{16} << 20;  // a summary is a few KiB

// steps.jsonl is appended line by line while a run goes, so its last line may be cut short:
// that one is skipped with a warning; a bad line before it means the file is damaged.
std::vector<StepRecord> read_steps(const std::string& path, std::vector<std::string>& warnings) {
  const std::string text = read_regular_file(path, kNoSizeLimit, "step log");

  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    pos = nl == std::string::npos ? text.size() : nl + 1;
  }
  const bool last_terminated = !text.empty() && text.back() == '\n';
  size_t last = lines.size();
  while (last > 0 && lines[last - 1].find_first_not_of(" \t\r") == std::string::npos) --last;

  std::vector<StepRecord> out;
  for (size_t i = 0; i < last; ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(i + 1);
    json j;
    std::string problem;
    try {
      j = json::parse(line);
      if (!j.is_object()) problem = "not a JSON object";
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
      problem = e.what();
    }
    if (!problem.empty()) {
      if (i + 1 == last) {
        warnings.push_back(where + ": skipped a partly written last line (" +
                           std::to_string(line.size()) + " bytes" +
                           (last_terminated ? "" : ", no newline") + ")");
        continue;
      }
      throw InputError(where + ": invalid step record: " + problem);
    }
    out.push_back(step_record_from_json(j, where));
  }
  if (out.empty()) throw InputError(path + ": no step records");
  return out;
}

std::optional<RunSummary> read_summary(const std::string& path,
                                       std::vector<std::string>& warnings) {
  if (!input_exists(path, "summary")) {
    warnings.push_back(path +
                       " not found (run unfinished?): every number is computed from "
                       "steps.jsonl");
    return std::nullopt;
  }
  const std::string text = read_regular_file(path, kMaxSummaryBytes, "summary");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw InputError(path + ": invalid JSON: " + e.what());
  }
  return summary_from_json(j, path);
}

template <class F>
std::vector<double> collect(const std::vector<StepRecord>& recs, F f) {
  std::vector<double> v;
  for (const StepRecord& r : recs) {
    const double x = f(r);
    if (std::isfinite(x)) v.push_back(x);
  }
  return v;
}

void compute_step_stats(const std::vector<StepRecord>& steady, ReportData& r) {
  const std::vector<double> step_ms =
      collect(steady, [](const StepRecord& s) { return s.time_ms.step; });
  r.step_ms_p50 = percentile(step_ms, 0.5);
  r.step_ms_p90 = percentile(step_ms, 0.9);
  r.step_ms_p99 = percentile(step_ms, 0.99);
  r.spread = r.step_ms_p50 > 0 ? (r.step_ms_p90 - r.step_ms_p50) / r.step_ms_p50 : 0;

  // Shares are ratios of sums, so long steps weigh by their length.
  PhaseTimes sum;
  for (const StepRecord& s : steady)
    for (const PhaseField& f : kPhaseFields) sum.*f.ms += s.time_ms.*f.ms;
  const auto pct = [&](double x) { return sum.step > 0 ? 100 * x / sum.step : 0; };
  StepShares& p = r.pct;
  p.data = pct(sum.data), p.forward = pct(sum.forward), p.backward = pct(sum.backward);
  p.recompute = pct(sum.recompute), p.optimizer = pct(sum.optimizer);
  p.comm_exposed = pct(sum.comm_exposed), p.other = pct(sum.other), p.comm = pct(sum.comm);
  p.recompute_of_backward = sum.backward > 0 ? 100 * sum.recompute / sum.backward : 0;
  p.compute = p.forward + p.backward + p.optimizer;
  r.overlap = sum.comm > 0 ? 1 - sum.comm_exposed / sum.comm : kNaN;
}

// Throughput and MFU at the p50 step, by the formula of the records and the summary
// (throughput(), train/step_record.h). A record's model_gflops x step time x world / tokens
// is the model's FLOPs per token; the peak is summary.json's (the run's one peak), else the
// records' model_gflops / mfu.
void compute_throughput(const std::vector<StepRecord>& steady, const RunSummary* summary,
                        ReportData& r) {
  r.tokens_per_step =
      percentile(collect(steady, [](const StepRecord& s) { return double(s.tokens); }), 0.5);
  const int world = r.world;
  const double flops_per_token = percentile(
      collect(steady,
              [&](const StepRecord& s) {
                return s.model_gflops > 0 ? s.model_gflops * 1e9 * (s.time_ms.step / 1e3) * world /
                                                double(s.tokens)
                                          : kNaN;
              }),
      0.5);
  r.peak_gflops = summary ? summary->peak_gflops : 0;
  r.peak_gflops_end = summary ? summary->peak_gflops_end : 0;
  if (r.peak_gflops <= 0)
    r.peak_gflops = percentile(
        collect(steady,
                [](const StepRecord& s) { return s.mfu > 0 ? s.model_gflops / s.mfu : kNaN; }),
        0.5);
  if (r.peak_gflops <= 0)
    r.warnings.push_back("no peak GFLOP/s in summary.json or the step records: MFU unknown");
  const Throughput t =
      throughput(r.tokens_per_step, r.step_ms_p50, flops_per_token, world, r.peak_gflops);
  r.tokens_per_s = t.tokens_per_s;
  r.model_gflops = t.model_gflops;
  r.mfu = t.mfu;
}

void compute_ranks(const std::vector<StepRecord>& steady, ReportData& r) {
  if (r.world <= 1) return;
  r.slowest_count.assign(size_t(r.world), 0);
  std::vector<double> ratio;
  int with_ranks = 0;
  for (const StepRecord& s : steady) {
    const RanksBlock& k = s.ranks;
    if (k.world <= 1) continue;
    ++with_ranks;
    if (k.slowest >= 0 && k.slowest < r.world) ++r.slowest_count[size_t(k.slowest)];
    if (k.step_ms.median > 0) ratio.push_back(k.step_ms.max / k.step_ms.median);
  }
  if (with_ranks == 0) return;
  const auto top = std::max_element(r.slowest_count.begin(), r.slowest_count.end());
  r.slowest_rank = int(top - r.slowest_count.begin());
  r.slowest_frac = double(*top) / with_ranks;
  r.max_over_median = ratio.empty() ? 1 : percentile(ratio, 0.5);
}

// What the communication rules reason from: medians over the steady steps, the bucket count
// of the config, the emulated link and how often each rank was named a straggler.
void compute_comm(const std::vector<StepRecord>& steady, ReportData& r) {
  CommFacts& c = r.comm;
  // The rank that waited least waited only for the network; the others' extra wait is for a
  // slower rank (the straggler rule's business). Records without per-rank phases: the
  // slowest rank's.
  size_t exposed = 0;
  while (kPhaseFields[exposed].ms != &PhaseTimes::comm_exposed) ++exposed;
  c.exposed_ms = percentile(collect(steady,
                                    [&](const StepRecord& s) {
                                      const Spread& e = s.ranks.phase_ms[exposed];
                                      return e.max > 0 ? e.min : s.time_ms.comm_exposed;
                                    }),
                            0.5);
  // percentile() of no values is 0: unknown.
  c.busbw_gbs = percentile(
      collect(steady,
              [](const StepRecord& s) { return s.comm_busbw_gbs > 0 ? s.comm_busbw_gbs : kNaN; }),
      0.5);
  c.busy_ms_max = percentile(
      collect(steady,
              [](const StepRecord& s) { return s.ranks.world > 1 ? s.ranks.busy_ms_max : kNaN; }),
      0.5);
  c.busy_ms_median = percentile(collect(steady,
                                        [](const StepRecord& s) {
                                          return s.ranks.world > 1 ? s.ranks.busy_ms_median : kNaN;
                                        }),
                                0.5);
  c.straggler_count.assign(size_t(r.world), 0);
  for (const StepRecord& s : steady)
    if (s.ranks.straggler >= 0 && s.ranks.straggler < r.world)
      ++c.straggler_count[size_t(s.ranks.straggler)];
  if (!r.has_config) return;
  const Config& cfg = r.config;
  c.buckets = gradient_buckets(cfg.model, cfg.comm.bucket_mb);
  c.grad_mib = 4 * double(GptSpec(cfg.model).registry().total_numel()) / 1048576.0;
  c.link_gbs = cfg.comm.link.bandwidth_gbps / 8;
}

// END - START of a counter; -1 when either is unknown or the counter went back (a reset).
int64_t change(int64_t start, int64_t end) { return start >= 0 && end >= start ? end - start : -1; }

// Each rank's link from the summary's network facts: what it carries, and its counters
// over the run.
void compute_links(const RunSummary* summary, ReportData& r) {
  if (!summary) return;
  for (const NetFacts& f : summary->network) {
    RankLink l;
    const NetSnapshot &a = f.start, &b = f.end;
    l.interface = f.interface;
    l.link_gbps = b.link_gbps, l.cap_gbps = b.cap_gbps;
    l.capped = b.cap_gbps > 0 && !(b.link_gbps <= b.cap_gbps);
    l.rate_gbps = l.capped ? b.cap_gbps : b.link_gbps;
    l.tcp_out_segs = change(a.tcp_out_segs, b.tcp_out_segs);
    l.tcp_retrans_segs = change(a.tcp_retrans_segs, b.tcp_retrans_segs);
    l.tx_bytes = change(a.tx_bytes, b.tx_bytes), l.rx_bytes = change(a.rx_bytes, b.rx_bytes);
    const int64_t tx_drop = change(a.tx_dropped, b.tx_dropped),
                  rx_drop = change(a.rx_dropped, b.rx_dropped);
    const int64_t tx_err = change(a.tx_errors, b.tx_errors),
                  rx_err = change(a.rx_errors, b.rx_errors);
    l.dropped = tx_drop >= 0 && rx_drop >= 0 ? tx_drop + rx_drop : -1;
    l.errors = tx_err >= 0 && rx_err >= 0 ? tx_err + rx_err : -1;
    r.comm.links.push_back(std::move(l));
  }
}

void compute_loss_and_memory(const std::vector<StepRecord>& recs, const RunSummary* summary,
                             ReportData& r) {
  // The summary's numbers where it has them (NaN: unknown or not finite), else the records'.
  const auto known = [](double x, double fallback) { return std::isfinite(x) ? x : fallback; };
  double last_val = kNaN;
  for (const StepRecord& s : recs)
    if (std::isfinite(s.val_loss)) last_val = s.val_loss;
  r.final_loss = known(summary ? summary->final_loss : kNaN, recs.back().loss);
  r.final_val_loss = known(summary ? summary->final_val_loss : kNaN, last_val);
  r.entropy_floor = summary ? summary->entropy_floor : kNaN;
  const double end_loss = std::isfinite(r.final_val_loss) ? r.final_val_loss : r.final_loss;
  r.loss_gap = end_loss - r.entropy_floor;  // NaN when the floor is unknown

  for (const StepRecord& s : recs) r.skipped_steps += s.skipped ? 1 : 0;
  r.skipped_pct = 100.0 * r.skipped_steps / double(recs.size());

  const StepRecord& last = recs.back();
  r.params_bytes = last.mem_bytes.params, r.grads_bytes = last.mem_bytes.grads;
  r.optimizer_bytes = last.mem_bytes.optimizer;
  for (const StepRecord& s : recs)
    r.activations_peak_bytes = std::max(r.activations_peak_bytes, s.mem_bytes.activations_peak);
  if (summary)
    r.activations_peak_bytes = std::max(r.activations_peak_bytes, summary->activations_peak_bytes);
}

// Per-stage numbers of a 1-bit Adam run; nothing for other runs.
void compute_onebit(const std::vector<StepRecord>& recs, ReportData& r) {
  for (size_t k = 0; k < r.onebit_stages.size(); ++k) {
    std::vector<StepRecord> in;
    for (const StepRecord& s : recs)
      if (s.stage && size_t(*s.stage) == k) in.push_back(s);
    if (in.empty()) continue;
    r.onebit = true;
    for (const StepRecord& s : in) r.onebit_sent_bytes += double(s.comm_sent_bytes);
    OneBitStageStats& st = r.onebit_stages[k];
    st.steps = int(in.size());
    st.step_ms_p50 =
        percentile(collect(in, [](const StepRecord& s) { return s.time_ms.step; }), 0.5);
    st.sent_bytes_p50 =
        percentile(collect(in, [](const StepRecord& s) { return double(s.comm_sent_bytes); }), 0.5);
    const std::vector<double> err =
        collect(in, [](const StepRecord& s) { return s.compression_error; });
    st.compression_error_p50 = err.empty() ? kNaN : percentile(err, 0.5);
  }
  const auto& w = r.onebit_stages[size_t(OneBitStage::warmup)];
  const auto& c = r.onebit_stages[size_t(OneBitStage::compressed)];
  r.onebit_volume_ratio =
      w.sent_bytes_p50 > 0 && c.steps > 0 ? c.sent_bytes_p50 / w.sent_bytes_p50 : kNaN;
}

}  // namespace

double activation_estimate_bytes(const Config& c) {
  return GptSpec::activations(c.model, gpt_options(c), c.run.device, c.train.micro_batch,
                              c.model.seq_len)
      .peak;
}

std::vector<std::string> ReportData::fired() const {
  std::vector<std::string> ids;
  for (const Finding& f : findings) ids.push_back(f.id);
  return ids;
}

ReportData analyze(const std::string& run_dir, const MachineInfo& machine) {
  // input_exists turns a symlink loop into an InputError before is_directory could throw.
  if (!input_exists(run_dir, "run directory")) {
    throw InputError("run directory '" + run_dir + "' not found");
  }
  if (!fs::is_directory(run_dir)) throw InputError("'" + run_dir + "' is not a directory");
  const fs::path dir(run_dir);
  const std::string steps_path = (dir / "steps.jsonl").string();
  if (!input_exists(steps_path, "step log"))
    throw InputError("'" + steps_path + "' not found: is '" + run_dir + "' a run directory?");

  ReportData r;
  r.run_dir = run_dir;
  r.machine = machine;
  const std::vector<StepRecord> recs = read_steps(steps_path, r.warnings);
  const std::optional<RunSummary> summary_read =
      read_summary((dir / "summary.json").string(), r.warnings);
  const RunSummary* summary = summary_read ? &*summary_read : nullptr;

  const std::string config_path = (dir / "config.yaml").string();
  if (input_exists(config_path, "config")) {
    try {
      r.config = load_config(config_path);
      r.has_config = true;
    } catch (const InputError& e) {
      r.warnings.push_back(std::string("config.yaml unreadable, no roofline: ") + e.what());
    }
  } else {
    r.warnings.push_back(config_path + " not found: no roofline");
  }

  r.steps = int(recs.size());
  r.warmup_excluded = warmup_steps_excluded(r.steps);
  const std::vector<StepRecord> steady(recs.begin() + r.warmup_excluded, recs.end());
  r.steady_steps = int(steady.size());
  r.first_steady_step = steady.front().step;
  r.last_step = recs.back().step;
  // An older summary may lack world and threads (0).
  r.world = summary && summary->world > 0 ? summary->world : std::max(1, recs.back().ranks.world);
  r.threads = summary && summary->threads > 0 ? summary->threads
              : r.has_config                  ? r.config.run.threads
                                              : 0;

  compute_step_stats(steady, r);
  compute_throughput(steady, summary, r);
  compute_ranks(steady, r);
  compute_loss_and_memory(recs, summary, r);
  compute_onebit(recs, r);
  if (summary) r.compress_choice = summary->compress_choice;

  if (machine.ram_bytes > 0) r.memory_limit_bytes = machine.ram_bytes / r.world;
  if (r.has_config && r.config.run.memory_limit_mb > 0)
    r.memory_limit_bytes =
        r.memory_limit_bytes > 0
            ? std::min(r.memory_limit_bytes, r.config.run.memory_limit_mb * 1048576.0)
            : r.config.run.memory_limit_mb * 1048576.0;
  if (machine.mem_bandwidth_gbs > 0 && r.peak_gflops > 0)
    r.machine_balance = r.peak_gflops / machine.mem_bandwidth_gbs;
  if (r.has_config) {
    r.roofline_rows = int64_t(r.config.train.micro_batch) * r.config.model.seq_len;
    r.roofline = roofline(r.config.model, r.config.train.micro_batch, r.peak_gflops,
                          machine.mem_bandwidth_gbs);
    r.activations_estimate_bytes = activation_estimate_bytes(r.config);
  }
  compute_comm(steady, r);
  compute_links(summary, r);
  measured_roofline(
      std::any_of(steady.begin(), steady.end(), [](const StepRecord& s) { return !s.ops.empty(); })
          ? steady
          : recs,
      r.peak_gflops, machine.mem_bandwidth_gbs, r);
  if (r.has_config && r.config.run.device == Device::cpu) {
    const RunCheck c = check_run(r, default_cpu_calibration(), nullptr);
    r.plan = {true, c.predicted.step_ms, c.predicted.compute_ms, c.predicted.comm_exposed_ms,
              c.measured_step_ms};
  }
  run_rules(r);
  return r;
}

}  // namespace ringstep
