// `ringstep plan`: a step predicted for a config at any scale (train/plan.h, docs/plan.md),
// a calibration fitted from a run, or a finished run checked against its prediction.
#include "train/plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "core/runtime.h"
#include "core/threads.h"
#include "launch/commands.h"
#include "models/gpt_spec.h"
#include "train/report.h"

namespace ringstep {
namespace {

std::string mib(double b) { return human_bytes(b); }

CpuCalibration read_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("calibration file '" + path + "' cannot be read");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw InputError("calibration file '" + path + "' is not a JSON object");
  return cpu_calibration_from_json(j, path);
}

// The run's analysis with the bandwidth measured on its threads (as `ringstep report`).
ReportData analyze_run(const std::string& run_dir) {
  const ReportData first = analyze(run_dir);
  return analyze(run_dir, measure_machine(std::min(first.threads, hardware_threads())));
}

// A run's averaged ops as the calibration reads them.
OpProfile run_ops(const ReportData& r) {
  OpProfile ops;
  for (const OpRow& row : r.ops) {
    OpStat& s = ops.at(row.phase, row.op);
    s.calls = int64_t(std::lround(row.calls)), s.ms = row.ms, s.flops = row.flops;
    s.bytes = row.bytes;
  }
  return ops;
}

int calibrate_command(const PlanCommand& o) {
  std::vector<ReportData> runs;
  for (const std::string& dir : o.calibrate_dirs) {
    runs.push_back(analyze_run(dir));
    const ReportData& r = runs.back();
    if (r.op_steps == 0)
      throw InputError("'" + dir +
                       "' has no op-timed steps to calibrate from: run it with --set "
                       "profile.op_every=1");
    const ReportData& a = runs.front();
    if (r.world != a.world || r.threads != a.threads ||
        r.config.precision.dtype != a.config.precision.dtype)
      throw InputError("--calibrate: '" + dir + "' ran at another shape than '" +
                       o.calibrate_dirs.front() +
                       "' (ranks, threads or precision.dtype): calibrate one shape at a time");
  }
  // This CPU's yardsticks, measured now (best of three each), then each run's ops against
  // them, and the median of the runs' fits.
  CpuCalibration cal;
  const int cores = hardware_threads();
  for (int rep = 0; rep < 3; ++rep) {
    Runtime& cpu = runtime(Device::cpu);
    cal.peak_gflops_per_core_fp32 =
        std::max(cal.peak_gflops_per_core_fp32, cpu.peak(DType::f32, false, 1).gflops);
    cal.peak_gflops_per_core_bf16 =
        std::max(cal.peak_gflops_per_core_bf16, cpu.peak(DType::bf16, false, 1).gflops);
    cal.node_bandwidth_gbs =
        std::max(cal.node_bandwidth_gbs, measure_machine(cores).mem_bandwidth_gbs);
  }
  cal.cores = cores;
  std::vector<PlanDevice> fits;
  std::string dirs;
  for (size_t i = 0; i < runs.size(); ++i) {
    const ReportData& r = runs[i];
    const PlanDevice dev =
        cpu_device(cal, r.config.precision.dtype, std::max(1, r.threads), r.world);
    const double exposed = r.step_ms_p50 * r.pct.comm_exposed / 100;
    fits.push_back(calibrate(run_ops(r), dev.peak_gflops, dev.mem_bandwidth_gbs, r.step_ms_p50,
                             exposed, o.calibrate_dirs[i]));
    dirs += (i ? ", " : "") + o.calibrate_dirs[i];
  }
  const PlanDevice d = median_fit(fits);
  cal.efficiency = d.efficiency;
  cal.step_overhead_ms = d.step_overhead_ms;
  cal.source = "calibrated from " + dirs;
  const std::string text = to_json(cal).dump(2) + "\n";
  if (!o.output.empty()) write_file_atomic(o.output, text);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

int check_command(const PlanCommand& o, const CpuCalibration& cpu, const LinkModel* bench_link) {
  const ReportData r = analyze_run(o.check_dir);
  const RunCheck c = check_run(r, cpu, bench_link);
  const Prediction& p = c.predicted;
  struct Row {
    const char* name;
    double predicted, measured;
  };
  const Row rows[] = {{"step_ms", p.step_ms, c.measured_step_ms},
                      {"compute_ms", p.compute_ms, c.measured_compute_ms},
                      {"optimizer_ms", p.optimizer_ms, c.measured_optimizer_ms},
                      {"comm_exposed_ms", p.comm_exposed_ms, c.measured_comm_exposed_ms},
                      {"tokens_per_s", p.tokens_per_s, c.measured_tokens_per_s},
                      {"mfu", p.mfu, c.measured_mfu}};
  if (o.json) {
    nlohmann::ordered_json j;
    for (const Row& row : rows) j[row.name] = row.predicted;
    for (const Row& row : rows) j[std::string("measured_") + row.name] = row.measured;
    for (const Row& row : rows)
      j[std::string("error_pct_") + row.name] = c.error_pct(row.predicted, row.measured);
    j["ranks"] = r.world;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("ringstep plan --check %s: %d rank%s, predicted from its config\n",
              o.check_dir.c_str(), r.world, r.world == 1 ? "" : "s");
  std::printf("  %-16s %12s %12s %8s\n", "field", "predicted", "measured", "error");
  for (const Row& row : rows)
    std::printf("  %-16s %12.4g %12.4g %+7.1f%%\n", row.name, row.predicted, row.measured,
                c.error_pct(row.predicted, row.measured));
  return 0;
}

void print_prediction(const Config& cfg, const PlanDevice& dev, const PlanCluster& cl,
                      const Prediction& p, const std::vector<Knob>& knobs) {
  std::printf("  device     %s: %.1f GFLOP/s and %.1f GB/s per rank (%s)\n", dev.name.c_str(),
              dev.peak_gflops, dev.mem_bandwidth_gbs, dev.source.c_str());
  std::printf("  links      intra-node %s (%.0f GB/s busbw, %.1f us)", cl.intra.source.c_str(),
              cl.intra.busbw_gbs, cl.intra.alpha_us);
  if (cl.ranks > cl.per_node)
    std::printf("; inter-node %s (%.0f GB/s, %.1f us)", cl.inter.source.c_str(), cl.inter.busbw_gbs,
                cl.inter.alpha_us);
  std::printf(
      "\n  step       %.2f ms = compute %.2f (forward %.2f, backward %.2f) + optimizer "
      "%.2f + exposed comm %.2f + overhead %.2f",
      p.step_ms, p.compute_ms, p.forward_ms, p.backward_ms, p.optimizer_ms, p.comm_exposed_ms,
      p.overhead_ms);
  const ModelParallel& mp = cl.parallel;
  if (mp.model_ranks() > 1)
    std::printf(" + tensor-parallel comm %.2f + pipeline bubble %.2f", p.tensor_comm_ms,
                p.bubble_ms);
  std::printf("\n");
  if (mp.model_ranks() > 1 || mp.distributed_optimizer)
    std::printf(
        "  parallel   tensor %d x pipeline %d (%d virtual stage%s) x data %d%s%s; the last stage's "
        "step (Megatron's layout; ringstep trains data-parallel only)\n",
        mp.tensor, mp.pipeline, mp.virtual_stages, mp.virtual_stages == 1 ? "" : "s",
        p.data_parallel, mp.distributed_optimizer ? ", optimizer sharded over data" : "",
        mp.tensor_comm_overlap ? ", tensor-parallel comm under the products" : "");
  if (p.data_parallel > 1)
    std::printf(
        "  comm       %d bucket%s of comm.bucket_mb = %g, %.2f ms in flight (%s), %s "
        "sent per rank\n",
        p.buckets, p.buckets == 1 ? "" : "s", cfg.comm.bucket_mb, p.comm_ms,
        cfg.optimizer.name == OptimizerKind::adamw         ? name(p.algorithm)
        : cfg.optimizer.name == OptimizerKind::onebit_adam ? "1-bit"
                                                           : "the run's mean of fp32 and 1-bit",
        mib(p.sent_bytes).c_str());
  if (p.staged) {
    std::printf("  0/1 Adam   the mean of %d steps; each stage's steps x one step, sent per rank:",
                cfg.train.steps);
    for (const auto& [stage, stage_name] : enum_names(OneBitStage{})) {
      const StagePrediction& s = p.stages[size_t(stage)];
      std::printf(" %s %d x %.2f ms, %s;", stage_name, s.steps, s.step_ms,
                  mib(s.sent_bytes).c_str());
    }
    std::printf(" %s over the run\n", mib(p.run_sent_bytes).c_str());
  }
  std::printf("  throughput %.4g tokens/s, MFU %.1f%% (6N + 6LCT over the peak per rank)\n",
              p.tokens_per_s, 100 * p.mfu);
  std::printf("  memory     %s per rank: params %s, grads %s, optimizer %s, activations %s",
              mib(p.memory_bytes()).c_str(), mib(p.params_bytes).c_str(),
              mib(p.grads_bytes).c_str(), mib(p.optimizer_bytes).c_str(),
              mib(p.activations_bytes).c_str());
  std::printf(" (recompute %s; ", name(cfg.recompute.policy));
  const GptSpec spec(cfg.model);
  GptOptions opt = gpt_options(cfg);
  bool first = true;
  for (const auto& [policy, policy_name] : enum_names(RecomputePolicy{})) {
    opt.recompute = policy;
    std::printf("%s%s %s", first ? "" : ", ", policy_name,
                mib(activation_bytes(spec, opt, dev.kind, cfg.train.micro_batch,
                                     cfg.model.seq_len, cl.parallel))
                    .c_str());
    first = false;
  }
  std::printf(")%s\n", dev.memory_bytes > 0 && p.memory_bytes() > dev.memory_bytes
                           ? ": DOES NOT FIT the device's memory"
                           : "");
  std::printf("  knobs      predicted step, change, how\n");
  for (const Knob& k : knobs) {
    std::string sets;
    for (const std::string& s : k.sets) sets += " --set " + s;
    std::printf("    %-34s %9.2f ms %+7.1f%%%s%s\n", k.what.c_str(), k.prediction.step_ms,
                100 * (k.prediction.step_ms / p.step_ms - 1), sets.c_str(),
                k.fits ? "" : " (does not fit)");
  }
}

nlohmann::ordered_json prediction_json(const Config& cfg, const PlanDevice& dev,
                                       const PlanCluster& cl, const Prediction& p,
                                       const std::vector<Knob>& knobs) {
  nlohmann::ordered_json j = {{"step_ms", p.step_ms},
                              {"compute_ms", p.compute_ms},
                              {"forward_ms", p.forward_ms},
                              {"backward_ms", p.backward_ms},
                              {"optimizer_ms", p.optimizer_ms},
                              {"comm_ms", p.comm_ms},
                              {"comm_exposed_ms", p.comm_exposed_ms},
                              {"overhead_ms", p.overhead_ms},
                              {"tensor_comm_ms", p.tensor_comm_ms},
                              {"bubble_ms", p.bubble_ms},
                              {"tokens_per_s", p.tokens_per_s},
                              {"mfu", p.mfu},
                              {"ranks", cl.ranks},
                              {"gpus_per_node", cl.per_node},
                              {"tensor_parallel", cl.parallel.tensor},
                              {"pipeline_parallel", cl.parallel.pipeline},
                              {"virtual_stages", cl.parallel.virtual_stages},
                              {"data_parallel", p.data_parallel},
                              {"distributed_optimizer", cl.parallel.distributed_optimizer},
                              {"tp_comm_overlap", cl.parallel.tensor_comm_overlap},
                              {"buckets", p.buckets},
                              {"algorithm", name(p.algorithm)},
                              {"sent_bytes", p.sent_bytes},
                              {"run_sent_bytes", p.run_sent_bytes}};
  if (p.staged) {  // 0/1 Adam: each stage's steps in the run and one such step
    nlohmann::ordered_json st;
    for (const auto& [stage, stage_name] : enum_names(OneBitStage{})) {
      const StagePrediction& s = p.stages[size_t(stage)];
      st[stage_name] = {{"steps", s.steps},
                        {"step_ms", s.step_ms},
                        {"optimizer_ms", s.optimizer_ms},
                        {"comm_ms", s.comm_ms},
                        {"comm_exposed_ms", s.comm_exposed_ms},
                        {"overhead_ms", s.overhead_ms},
                        {"sent_bytes", s.sent_bytes}};
    }
    j["stages"] = st;
  }
  j["memory_bytes"] = {{"params", p.params_bytes},
                       {"grads", p.grads_bytes},
                       {"optimizer", p.optimizer_bytes},
                       {"activations", p.activations_bytes},
                       {"total", p.memory_bytes()}};
  j["device"] = to_json(dev);
  nlohmann::ordered_json ks = nlohmann::ordered_json::array();
  for (const Knob& k : knobs)
    ks.push_back(
        {{"what", k.what}, {"sets", k.sets}, {"step_ms", k.prediction.step_ms}, {"fits", k.fits}});
  j["knobs"] = ks;
  (void)cfg;
  return j;
}

}  // namespace

int run_plan(const PlanCommand& o) {
  if (!o.calibrate_dirs.empty()) return calibrate_command(o);
  const CpuCalibration cpu =
      o.calibration.empty() ? default_cpu_calibration() : read_calibration(o.calibration);
  std::optional<LinkModel> bench_link;
  if (!o.bench.empty()) bench_link = fit_link(o.bench, "ring");
  if (!o.check_dir.empty()) return check_command(o, cpu, bench_link ? &*bench_link : nullptr);

  const Config cfg = load_config(o.config, o.overrides);
  const int per_node = std::min(o.ranks, o.gpus_per_node > 0 ? o.gpus_per_node : o.ranks);
  PlanCluster cl;
  cl.ranks = o.ranks;
  cl.per_node = per_node;
  cl.parallel = {o.tensor_parallel, o.pipeline_parallel, o.virtual_stages, o.distributed_optimizer,
                 o.tp_comm_overlap};
  check_parallel(cfg, cl);
  validate_for_world(cfg, o.ranks / cl.parallel.model_ranks());
  PlanDevice dev;
  const std::string device = o.device.empty() ? "cpu" : o.device;
  if (device == "cpu") {
    const int threads = resolve_threads(cfg.run.threads, per_node, cpu.cores);
    dev = cpu_device(cpu, cfg.precision.dtype, threads, per_node);
    cl.intra = bench_link ? *bench_link : table_link("shm");
    cl.inter = cl.intra;
    if (cfg.comm.link.bandwidth_gbps > 0)
      cl.intra = cl.inter =
          emulated_link(cfg.comm.link.bandwidth_gbps, cfg.comm.link.latency_us, cl.intra);
    cl.fixed_algorithm = true;
  } else {
    dev = table_device(device, cfg.precision.dtype);
    cl.intra = table_link(device == "h200-sxm" ? "nvlink4-h200" : "nvlink4");
    if (bench_link) cl.intra = *bench_link;
    cl.inter = table_link("ndr");
  }
  if (o.link_gbps > 0) {
    LinkModel& l = cl.ranks > cl.per_node ? cl.inter : cl.intra;
    l = emulated_link(o.link_gbps, cfg.comm.link.latency_us, l);
    if (cl.ranks <= cl.per_node) cl.inter = cl.intra;
  }
  const Prediction p = predict(cfg, dev, cl);
  const std::vector<Knob> ks = knobs(cfg, dev, cl);
  if (o.json) {
    std::printf("%s\n", prediction_json(cfg, dev, cl, p, ks).dump(2).c_str());
    return 0;
  }
  const ModelConfig& m = cfg.model;
  std::printf(
      "ringstep plan %s: GPT %d layers, d_model %d, seq %d, vocab %d; %d micro x %d accum x %d "
      "ranks (%d per node), %s, recompute %s, %s\n",
      o.config.c_str(), m.n_layers, m.d_model, m.seq_len, m.vocab_size, cfg.train.micro_batch,
      cfg.train.grad_accum_steps, cl.ranks, cl.per_node, dtype_name(cfg.precision.dtype),
      name(cfg.recompute.policy), name(cfg.optimizer.name));
  print_prediction(cfg, dev, cl, p, ks);
  return 0;
}

}  // namespace ringstep
