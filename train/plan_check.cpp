// The plan against this machine: the CPU's calibrated device, calibration files, and a
// finished run predicted from its config (`ringstep plan --check`, the report's plan line).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "train/plan.h"
#include "train/report.h"

namespace ringstep {
namespace {

// This host, calibrated (default_cpu_calibration).
constexpr double kCpuPeakPerCoreFp32 = 130.5, kCpuPeakPerCoreBf16 = 157.4,
                 kCpuNodeBandwidthGbs = 33.3;
constexpr int kCpuCores = 2;
constexpr std::array<double, kOpClassCount> kCpuEfficiency = {0.118, 0.079, 0.092, 0.49};
constexpr double kCpuStepOverheadMs = 25.6;

}  // namespace

CpuCalibration default_cpu_calibration() {
  // docs/plan.md, "This CPU": `ringstep plan --calibrate` of a configs/tiny.yaml run (fp32,
  // one rank of two threads, op timing on every step) on this host (AMD EPYC Zen 5, 2 vCPUs).
  CpuCalibration c;
  c.peak_gflops_per_core_fp32 = kCpuPeakPerCoreFp32;
  c.peak_gflops_per_core_bf16 = kCpuPeakPerCoreBf16;
  c.node_bandwidth_gbs = kCpuNodeBandwidthGbs;
  c.cores = kCpuCores;
  c.efficiency = kCpuEfficiency;
  c.step_overhead_ms = kCpuStepOverheadMs;
  c.source = "this CPU, calibrated (docs/plan.md)";
  return c;
}

PlanDevice cpu_device(const CpuCalibration& c, DType dtype, int threads, int local_ranks) {
  PlanDevice d;
  d.name = "cpu";
  const double per_core =
      dtype == DType::f32 ? c.peak_gflops_per_core_fp32 : c.peak_gflops_per_core_bf16;
  const double cores = std::min(double(threads), double(c.cores) / std::max(1, local_ranks));
  d.peak_gflops = per_core * cores;
  d.mem_bandwidth_gbs = c.node_bandwidth_gbs / std::max(1, local_ranks);
  d.efficiency = c.efficiency;
  d.step_overhead_ms = c.step_overhead_ms;
  d.source = c.source;
  return d;
}

nlohmann::ordered_json to_json(const PlanDevice& d) {
  nlohmann::ordered_json eff;
  for (const auto& [c, c_name] : enum_names(OpClass{})) eff[c_name] = d.efficiency[size_t(c)];
  return {{"device", d.name},
          {"peak_gflops", d.peak_gflops},
          {"mem_bandwidth_gbs", d.mem_bandwidth_gbs},
          {"efficiency", eff},
          {"step_overhead_ms", d.step_overhead_ms},
          {"source", d.source}};
}

nlohmann::ordered_json to_json(const CpuCalibration& c) {
  nlohmann::ordered_json eff;
  for (const auto& [k, k_name] : enum_names(OpClass{})) eff[k_name] = c.efficiency[size_t(k)];
  return {{"peak_gflops_per_core_fp32", c.peak_gflops_per_core_fp32},
          {"peak_gflops_per_core_bf16", c.peak_gflops_per_core_bf16},
          {"node_bandwidth_gbs", c.node_bandwidth_gbs},
          {"cores", c.cores},
          {"efficiency", eff},
          {"step_overhead_ms", c.step_overhead_ms},
          {"source", c.source}};
}

CpuCalibration cpu_calibration_from_json(const nlohmann::json& j, const std::string& where) {
  auto number = [&](const nlohmann::json& o, const std::string& key, double lo, double hi) {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number())
      throw InputError(where + ": '" + key + "' missing or not a number");
    const double v = o[key];
    if (!(v >= lo && v <= hi))
      throw InputError(where + ": '" + key + "' is " + std::to_string(v) + ", expected " +
                       std::to_string(lo) + " to " + std::to_string(hi));
    return v;
  };
  CpuCalibration c;
  c.peak_gflops_per_core_fp32 = number(j, "peak_gflops_per_core_fp32", 1e-3, 1e9);
  c.peak_gflops_per_core_bf16 = number(j, "peak_gflops_per_core_bf16", 1e-3, 1e9);
  c.node_bandwidth_gbs = number(j, "node_bandwidth_gbs", 1e-3, 1e9);
  c.cores = int(number(j, "cores", 1, 1 << 20));
  if (!j.contains("efficiency")) throw InputError(where + ": 'efficiency' missing");
  for (const auto& [k, k_name] : enum_names(OpClass{}))
    c.efficiency[size_t(k)] = number(j["efficiency"], k_name, 1e-6, 10);
  c.step_overhead_ms = number(j, "step_overhead_ms", 0, 1e9);
  c.source = j.contains("source") && j["source"].is_string() ? std::string(j["source"]) : where;
  return c;
}

PlanCluster run_cluster(const ReportData& r, const LinkModel* bench_link) {
  const Config& cfg = r.config;
  PlanCluster c;
  c.ranks = r.world;
  c.per_node = r.world;
  const LinkModel shm = bench_link ? *bench_link : table_link("shm");
  c.intra = cfg.comm.link.bandwidth_gbps > 0
                ? emulated_link(cfg.comm.link.bandwidth_gbps, cfg.comm.link.latency_us, shm)
                : shm;
  const std::vector<RankLink>& links = r.comm.links;
  const bool hosts = cfg.comm.link.bandwidth_gbps <= 0 && r.world > 1 &&
                     int(links.size()) == r.world &&
                     std::all_of(links.begin(), links.end(), [](const RankLink& l) {
                       return !l.interface.empty() && std::isfinite(l.rate_gbps) && l.rate_gbps > 0;
                     });
  if (hosts) {  // a ring over the hosts runs at its slowest link
    double slowest = links[0].rate_gbps;
    for (const RankLink& l : links) slowest = std::min(slowest, l.rate_gbps);
    c.per_node = 1;
    c.intra = emulated_link(slowest, 0, shm);
    c.intra.source = format_message("the slowest rank's interface, %g Gbit/s (network facts)",
                                    slowest);
  }
  c.inter = c.intra;
  c.fixed_algorithm = true;
  c.algorithm = AllreduceAlgorithm::ring;  // ring, or the transport's (MPI's is a ring too)
  return c;
}

RunCheck check_run(const ReportData& r, const CpuCalibration& cpu, const LinkModel* bench_link) {
  if (!r.has_config) throw InputError("the run directory has no config.yaml to predict from");
  RunCheck c;
  const PlanDevice dev = cpu_device(cpu, r.config.precision.dtype, std::max(1, r.threads), r.world);
  c.predicted = predict(r.config, dev, run_cluster(r, bench_link));
  const auto& compressed = r.onebit_stages[size_t(OneBitStage::compressed)];
  const bool onebit = r.config.optimizer.name == OptimizerKind::onebit_adam && compressed.steps > 0;
  c.measured_step_ms = onebit ? compressed.step_ms_p50 : r.step_ms_p50;
  if (c.predicted.staged && r.onebit) {  // 0/1 Adam: each stage's p50, weighed by its steps
    double steps = 0, ms = 0;
    for (const OneBitStageStats& s : r.onebit_stages)
      steps += s.steps, ms += s.steps * s.step_ms_p50;
    c.measured_step_ms = ms / steps;
  }
  const double step = r.step_ms_p50;
  c.measured_compute_ms = step * (r.pct.forward + r.pct.backward) / 100;
  c.measured_optimizer_ms = step * r.pct.optimizer / 100;
  c.measured_comm_exposed_ms = step * r.pct.comm_exposed / 100;
  c.measured_tokens_per_s = r.tokens_per_s;
  c.measured_mfu = r.mfu;
  return c;
}

}  // namespace ringstep
