#include "train/run_log.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cpu/blas_env.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm.h"
#include "core/error.h"
#include "core/files.h"
#include "core/stats.h"
#include "core/threads.h"
#include "models/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/onebit_adam.h"
#include "optim/zero_one_adam.h"
#include "train/report.h"
#include "train/run_dir.h"
#include "train/run_summary.h"

namespace ringstep {
namespace {

constexpr double kMiB = 1048576.0;

void print_loss_scale(const Config& cfg, const LossScaler& scaler) {
  const LossScaleConfig& ls = cfg.precision.loss_scale;
  std::printf("loss scale %s", name(scaler.mode()));
  if (scaler.mode() == LossScaleMode::dynamic)
    std::printf(" (initial %g, x%g every %d clean steps, x%g on overflow, hysteresis %d, min %g)",
                scaler.scale(), ls.growth_factor, ls.growth_interval, ls.backoff_factor,
                ls.hysteresis, ls.min_scale);
  else if (scaler.mode() == LossScaleMode::static_)
    std::printf(" (static %g)", scaler.scale());
  std::printf("\n");
}

// The precision and recompute lines, with the activation arena the model's spec predicts
// (models/gpt_spec.h).
void print_precision_header(const Config& cfg, const Gpt& model, const LossScaler& scaler) {
  const GptOptions& o = model.options();
  const ModelConfig& mc = model.config();
  const bool half = o.act_dtype != DType::f32;
  std::printf("  precision  %s activations%s, fp32 master weights, gradients and AdamW; ",
              dtype_name(o.act_dtype),
              half ? (std::string(" and matrix-product inputs (kernel ") +
                      cpu::gemm16_kernel(o.act_dtype) + ", fp32 accumulate)")
                         .c_str()
                   : "");
  print_loss_scale(cfg, scaler);
  const ActivationBytes act =
      model.spec().activations(o, cfg.run.device, cfg.train.micro_batch, mc.seq_len);
  int recomputed = 0;
  for (int l = 0; l < mc.n_layers; ++l) recomputed += model.layer_recomputed(l);
  std::printf("  recompute  %s", name(cfg.recompute.policy));
  if (o.recompute == RecomputePolicy::every_k) std::printf(" (k = %d)", o.recompute_k);
  if (o.recompute == RecomputePolicy::selective)
    std::printf(
        ": every block keeps its matrix products' outputs; LayerNorm and GELU outputs "
        "and attention probabilities are rebuilt in backward");
  else if (recomputed > 0)
    std::printf(": %d of %d blocks keep only their input and are rebuilt in backward", recomputed,
                mc.n_layers);
  std::printf(
      "\n  act est.   %.2f MiB saved by forward, %.2f MiB arena peak (models/gpt_spec.h; "
      "measured peak: `act` in each step line)\n",
      act.saved / kMiB, act.peak / kMiB);
}

void print_data_and_batch(const Config& cfg, const RunFacts& f) {
  if (std::isnan(f.data.entropy_rate))
    std::printf("  data       %s\n", f.data_description.c_str());
  else
    std::printf(
        "  data       %s\n             entropy rate %.4f nats/token, floor for a "
        "%d-token window %.4f nats/token\n",
        f.data_description.c_str(), f.data.entropy_rate, cfg.model.seq_len, f.data.window_floor);
  const int B = cfg.train.micro_batch, accum = cfg.train.grad_accum_steps;
  std::printf("  batch      %d micro x %d accum x %d ranks = %d sequences = %lld tokens/step\n", B,
              accum, f.world, B * accum * f.world, static_cast<long long>(f.tokens_per_step));
}

void print_comm_and_trace(const Config& cfg, const RunFacts& f) {
  if (f.world > 1) {
    std::printf("  comm       %s AllReduce over %s, %zu buckets of <= %.2f MiB, overlap %s\n",
                name(cfg.comm.allreduce), name(cfg.comm.backend), f.buckets, cfg.comm.bucket_mb,
                cfg.comm.overlap ? "on" : "off");
    if (cfg.comm.link.bandwidth_gbps > 0 || cfg.comm.link.latency_us > 0)
      std::printf("  LINK EMULATION ON: every message paced to %.1f Gb/s, %.1f us latency\n",
                  cfg.comm.link.bandwidth_gbps, cfg.comm.link.latency_us);
  }
  if (!f.trace_window.empty())
    std::printf("  trace      steps %d-%d -> %s/trace/rank-R.json\n", f.trace_window[0],
                f.trace_window[1], cfg.run.out_dir.c_str());
  if (!f.trace_note.empty()) std::printf("  warning    %s\n", f.trace_note.c_str());
}

// 0/1 Adam's schedule, and what it will not do as asked (optim/zero_one_adam.h).
void print_zero_one_header(const Config& cfg, const RunFacts& f) {
  const ZeroOneConfig& zo = cfg.optimizer.zero_one;
  std::printf(
      "  optimizer  0/1 Adam: variance on fp32 averaged gradients at intervals doubling every %d "
      "updates, frozen after step %d; 1-bit syncs between (own sign transport), after the "
      "freeze every 1..%d steps (doubling every %d)\n",
      zo.var_update_scaler, zo.var_freeze_step, zo.local_step_clipper, zo.local_step_scaler);
  const std::string warning = zero_one_warning(cfg, f.world);
  if (!warning.empty()) std::printf("  warning    %s\n", warning.c_str());
}

// 1-bit Adam's plan, and what it will not do as asked (optim/onebit_adam.h).
void print_optimizer_header(const Config& cfg, const RunFacts& f) {
  if (cfg.optimizer.name == OptimizerKind::zero_one_adam) return print_zero_one_header(cfg, f);
  if (cfg.optimizer.name != OptimizerKind::onebit_adam) return;
  const OneBitConfig& ob = cfg.optimizer.onebit;
  const std::string per =
      ob.scale_block > 0 ? std::to_string(ob.scale_block) + " elements" : std::string("tensor");
  std::printf(
      "  optimizer  1-bit Adam: AdamW (gradients by %s) for %d steps, then (compress %s) 1-bit "
      "momentum (own sign transport, scale %s per %s, %s)\n",
      name(cfg.comm.allreduce), ob.freeze_step, name(ob.compress), name(ob.scale), per.c_str(),
      ob.overlap ? "sent under backward, clipped by the previous step's norm"
                 : "sent after backward");
  const std::string warning = onebit_warning(cfg, f.world);
  if (!warning.empty()) std::printf("  warning    %s\n", warning.c_str());
}

}  // namespace

void RunTotals::add(const PhaseTimes& slowest) {
  step_ms.push_back(slowest.step);
  step_ms_sum += slowest.step;
  comm_ms += slowest.comm;
  comm_exposed_ms += slowest.comm_exposed;
}

void print_checkpoint_line(const std::string& path, uint64_t bytes, double ms) {
  std::printf("checkpoint: %s (%.1f MiB in %.1f ms: %.0f MiB/s)\n", path.c_str(), bytes / kMiB, ms,
              bytes / kMiB / (ms / 1e3));
}

void RunTotals::resume(const std::vector<std::string>& records, int step) {
  for (const std::string& line : records) {
    const StepRecord r = step_record_from_json(nlohmann::json::parse(line), "steps.jsonl");
    add(r.time_ms);
    last_loss = float(r.loss);
  }
  steps_run = resumed_step = step;
}

std::string model_summary(const GptSpec& spec) {
  const ModelConfig& mc = spec.config();
  const bool padded = spec.vocab_rows() != mc.vocab_size;
  const std::string rows =
      padded ? format_message(" (%lld rows)", static_cast<long long>(spec.vocab_rows())) : "";
  return format_message(
      "GPT %d layers, d_model %d, %d heads, seq %d, vocab %d%s: %s params (%s without position "
      "embeddings%s)",
      mc.n_layers, mc.d_model, mc.n_heads, mc.seq_len, mc.vocab_size, rows.c_str(),
      human_count(double(spec.param_count())).c_str(),
      human_count(double(spec.flops_param_count())).c_str(), padded ? " and padding" : "");
}

void print_header(const Config& cfg, const RunFacts& f, const Gpt& model,
                  const LossScaler& scaler) {
  std::printf("ringstep train: %s (config %s)\n", cfg.run.name.c_str(),
              cfg.source_path.empty() ? "defaults" : cfg.source_path.c_str());
  std::printf("  model      %s\n", model_summary(model.spec()).c_str());
  std::printf(
      "  flops      %.3f MFLOP/token model (6N + 6LCT: causal attention counted once, "
      "N without position embeddings)\n",
      f.flops_per_token / 1e6);
  print_data_and_batch(cfg, f);
  std::printf(
      "  compute    %d ranks; per rank one OpenMP pool of %d threads (rank 0 on CPUs %s) shared "
      "by our loops and %s, idle threads %s%s; fp32 products on %s; peak %.1f GFLOP/s/rank (%s)\n",
      f.world, f.threads, process_cpus_description().c_str(), blas_description().c_str(),
      omp_wait_description().c_str(),
      f.world > 1 ? "; + 1 comm engine thread (sleeps when no collective is queued)" : "",
      cpu::sgemm_kernel(), f.peak_gflops, f.peak_source.c_str());
  if (f.threads > hardware_threads()) {
    std::printf(
        "  warning    %d threads per rank on %d CPU(s): they take turns. Under mpirun give "
        "each rank its cores (--map-by slot:PE=%d --bind-to core) or lower run.threads\n",
        f.threads, hardware_threads(), f.threads);
  }
  std::printf(
      "  memory     params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB, activation arena "
      "%.2f MiB reserved",
      f.param_bytes / kMiB, f.param_bytes / kMiB, f.optimizer_bytes / kMiB, f.arena_bytes / kMiB);
  if (f.weight_copy_bytes > 0)
    std::printf(", weight copies for the products %.2f MiB", f.weight_copy_bytes / kMiB);
  std::printf("\n");
  print_precision_header(cfg, model, scaler);
  const std::string scale_warning = loss_scale_warning(cfg.precision);
  if (!scale_warning.empty()) std::printf("  warning    %s\n", scale_warning.c_str());
  print_optimizer_header(cfg, f);
  print_comm_and_trace(cfg, f);
  std::printf("  run dir    %s\n", cfg.run.out_dir.c_str());
  std::fflush(stdout);
}

namespace {

// H:MM:SS.
std::string clock_text(double s) {
  const long total = std::lround(std::max(0.0, s));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  return buf;
}

}  // namespace

void print_step_line(const StepRecord& r, int steps, bool show_scale, const RunProgress& progress) {
  const PhaseTimes& t = r.time_ms;
  std::printf("step %d/%d | loss %.4f", r.step, steps, r.loss);
  if (!std::isnan(r.val_loss)) std::printf(" | val %.4f", r.val_loss);
  std::printf(" | lr %.2e", r.lr);
  if (r.skipped)
    std::printf(" | SKIPPED (inf/NaN gradients)");
  else
    std::printf(" | gnorm %.3f", r.grad_norm);
  if (show_scale) std::printf(" | scale %g", r.loss_scale);
  std::printf(" | %.1f ms (data %.1f fwd %.1f bwd %.1f", t.step, t.data, t.forward, t.backward);
  if (t.recompute > 0) std::printf(" [recompute %.1f]", t.recompute);
  std::printf(
      " opt %.1f comm %.1f exposed %.1f) | %s tok/s | %.1f GFLOP/s | MFU %.1f%% | act "
      "%.1f MiB | %s tok | %s elapsed, ETA %s\n",
      t.optimizer, t.comm, t.comm_exposed, human_count(r.tokens_per_s).c_str(), r.model_gflops,
      100 * r.mfu, r.mem_bytes.activations_peak / kMiB,
      human_count(double(progress.tokens)).c_str(), clock_text(progress.elapsed_s).c_str(),
      clock_text(progress.eta_s).c_str());
  if (r.stage) {
    std::printf("    1-bit Adam %s | sent %sB/rank", name(*r.stage),
                human_count(double(r.comm_sent_bytes)).c_str());
    if (!std::isnan(r.compression_error))
      std::printf(" | compression error %.3f", r.compression_error);
    std::printf("\n");
  }
  std::fflush(stdout);
}

void print_loss_line(int step, int steps, float loss, double lr, bool applied) {
  std::printf("step %d/%d | loss %.4f | lr %.2e%s (profiler off)\n", step, steps, loss, lr,
              applied ? "" : " | SKIPPED");
  std::fflush(stdout);
}

std::string StragglerLog::update(int step, int straggler, double busy_ratio) {
  char line[200] = "";
  quiet_ = straggler < 0 ? quiet_ + 1 : 0;
  if (straggler >= 0 && straggler != rank_) {
    since_ = step - kStragglerSteps + 1;
    std::snprintf(line, sizeof line,
                  "  straggler: rank %d busy %.0f%% above the median since step %d (%d steps "
                  "over %.0f%%)\n",
                  straggler, 100 * (busy_ratio - 1), since_, kStragglerSteps,
                  100 * (kStragglerRatio - 1));
    rank_ = straggler;
  } else if (rank_ >= 0 && quiet_ == kStragglerSteps) {
    const int back = step - kStragglerSteps + 1;  // the first of the quiet steps
    std::snprintf(line, sizeof line,
                  "  straggler: rank %d back within %.0f%% of the median since step %d (slow "
                  "for %d steps)\n",
                  rank_, 100 * (kStragglerRatio - 1), back, back - since_);
    rank_ = -1;
  }
  return line;
}

namespace {

// The summary of the run: its speed from the steady steps (the first ones, with page faults
// and cold caches, are left out of the percentiles: core/stats.h), its loss and its costs.
RunSummary summarize(const Config& cfg, const RunFacts& f, const RunTotals& totals,
                     const LossScaler& scaler, const RunEnd& end) {
  RunSummary s;
  s.profile_enabled = cfg.profile.enabled;
  s.steps = totals.steps_run;
  s.resumed_at_step = totals.resumed_step;
  s.world = f.world;
  s.threads = f.threads;
  s.final_loss = end.final_loss;
  s.final_val_loss = end.final_val_loss;
  s.entropy_rate = f.data.entropy_rate;
  s.entropy_floor = f.data.window_floor;
  s.skipped_steps = scaler.state().skipped_total;
  s.optimizer_steps = end.optimizer_steps;
  s.precision = cfg.precision.dtype;
  s.loss_scale_mode = scaler.mode();
  s.loss_scale_final = scaler.scale();
  s.recompute = cfg.recompute.policy;
  if (!end.stop_reason.empty()) s.stopped_early = end.stop_reason;

  s.warmup_steps_excluded = warmup_steps_excluded(int(totals.step_ms.size()));
  const std::vector<double> steady(totals.step_ms.begin() + s.warmup_steps_excluded,
                                   totals.step_ms.end());
  s.step_ms_p50 = percentile(steady, 0.5);
  s.step_ms_p90 = percentile(steady, 0.9);
  // Wall time of the whole loop (evaluations included), the same with the profiler on or
  // off: what the profiler-overhead benchmark compares.
  const int steps_here = totals.steps_run - totals.resumed_step;
  s.loop_wall_s = end.loop_s;
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) s.peak_rss_bytes = uint64_t(usage.ru_maxrss) * 1024;
  s.tokens_per_s_wall = end.loop_s > 0 ? double(f.tokens_per_step) * steps_here / end.loop_s : 0;
  // The p50 step; with the profiler off, the mean step of the loop's wall time.
  const double step_ms = !steady.empty()  ? s.step_ms_p50
                         : steps_here > 0 ? 1e3 * end.loop_s / steps_here
                                          : 0;
  const Throughput t =
      throughput(double(f.tokens_per_step), step_ms, f.flops_per_token, f.world, f.peak_gflops);
  s.tokens_per_s = t.tokens_per_s;
  s.model_gflops = t.model_gflops;
  s.mfu = t.mfu;
  s.peak_gflops = f.peak_gflops;
  s.peak_gflops_end = end.peak_gflops_end;

  s.comm_exposed_frac = totals.step_ms_sum > 0 ? totals.comm_exposed_ms / totals.step_ms_sum : 0;
  // Overlap = 1 - exposed / in flight, over the whole run; NaN (null) with no communication.
  if (totals.comm_ms > 0) s.overlap = 1.0 - totals.comm_exposed_ms / totals.comm_ms;
  s.activations_peak_bytes = end.activations_peak_bytes;
  s.checkpoints_saved = int(totals.checkpoint_ms.size());
  s.checkpoint_bytes = totals.checkpoint_bytes;
  if (!totals.checkpoint_ms.empty()) s.checkpoint_ms_p50 = percentile(totals.checkpoint_ms, 0.5);
  s.network = end.network;
  s.compress_choice = end.compress_choice;
  return s;
}

void print_done(const Config& cfg, const RunSummary& s) {
  std::printf("done: %d steps", s.steps);
  if (s.resumed_at_step > 0) std::printf(" (resumed at step %d)", s.resumed_at_step);
  std::printf(" | final loss %.4f | val loss %.4f", s.final_loss, s.final_val_loss);
  if (!std::isnan(s.entropy_floor))
    std::printf(" | floor %.4f (gap %.4f nats)", s.entropy_floor,
                s.final_val_loss - s.entropy_floor);
  std::printf(" | step p50 %.1f ms | %s tok/s | MFU %.1f%% (peak %.1f GFLOP/s/rank", s.step_ms_p50,
              human_count(s.tokens_per_s).c_str(), 100 * s.mfu, s.peak_gflops);
  // Information only, never a second denominator: how far this machine's speed moved.
  if (s.peak_gflops > 0 && s.peak_gflops_end > 0 && s.peak_gflops_end != s.peak_gflops)
    std::printf("; measured again at the end: %.1f, %+.0f%%", s.peak_gflops_end,
                100 * (s.peak_gflops_end / s.peak_gflops - 1));
  std::printf(")\n");
  std::printf(
      "  activations: arena peak %.2f MiB measured; %.2f MiB predicted by the model's spec "
      "(%s, recompute %s)\n",
      s.activations_peak_bytes / kMiB, activation_estimate_bytes(cfg) / kMiB, name(s.precision),
      name(s.recompute));
  std::printf("  peak RSS %.1f MiB (rank 0) | loop wall time %s\n", s.peak_rss_bytes / kMiB,
              clock_text(s.loop_wall_s).c_str());
  if (s.skipped_steps > 0)
    std::printf("  skipped %lld of %d steps (inf/NaN gradients); loss scale now %g\n",
                static_cast<long long>(s.skipped_steps), s.steps, s.loss_scale_final);
}

}  // namespace

void write_summary(const Config& cfg, const RunFacts& f, const RunTotals& totals,
                   const LossScaler& scaler, const RunEnd& end) {
  const RunSummary s = summarize(cfg, f, totals, scaler, end);
  print_done(cfg, s);  // first: the console has it if the disk is full
  write_file_atomic(cfg.run.out_dir + "/summary.json", summary_text(s));
  // The run's files that are there: a fault mid-run may have taken one away.
  std::string files;
  for (const char* f : {"config.yaml", "steps.jsonl", "summary.json"})
    if (std::filesystem::is_regular_file(cfg.run.out_dir + "/" + f))
      files += (files.empty() ? "" : ",") + std::string(f);
  const bool one = files.find(',') == std::string::npos;
  std::printf("  wrote %s/%s%s%s\n", cfg.run.out_dir.c_str(), one ? "" : "{", files.c_str(),
              one ? "" : "}");
}

}  // namespace ringstep
