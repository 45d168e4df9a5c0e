#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/checksum.h"
#include "core/cpu/blas_env.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/peak.h"
#include "core/error.h"
#include "core/profiler.h"
#include "core/threads.h"
#include "core/trace.h"
#include "models/gpt.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "train/data.h"
#include "train/grad_sync.h"
#include "train/report.h"
#include "train/run_dir.h"

namespace ringstep {
namespace {

using json = nlohmann::ordered_json;

double round_to(double x, double q) { return std::round(x / q) * q; }

struct Evaluator {
  std::unique_ptr<DataSource> source;
  int batches, B, T;
  std::vector<int32_t> in, tg;
  float run(Gpt& model, Arena& arena) {
    source->reset();
    double sum = 0;
    for (int i = 0; i < batches; ++i) {
      source->next_batch(in.data(), tg.data(), B, T);
      sum += model.evaluate(in.data(), tg.data(), B, T, arena);
    }
    return float(sum / batches);
  }
};

// The precision and recompute lines of the header, with Korthikanti et al. (2022)'s estimate
// of activation bytes per block (docs/metrics.md: 16·sbh + a·s²·b values without dropout).
void print_precision_header(const Config& cfg, const Gpt& model, const LossScaler& scaler, int B,
                            int T) {
  const GptOptions& o = model.options();
  const ModelConfig& mc = model.config();
  const bool half = o.act_dtype != DType::f32;
  std::printf("  precision  %s activations%s, fp32 master weights, gradients and AdamW; loss "
              "scale %s",
              dtype_name(o.act_dtype),
              half ? (std::string(" and matrix-product inputs (kernel ") +
                      cpu::gemm16_kernel(o.act_dtype) + ", fp32 accumulate)")
                         .c_str()
                   : "",
              name(scaler.mode()));
  if (scaler.mode() == LossScaleMode::dynamic)
    std::printf(" (initial %g, x%g every %d clean steps, x%g on overflow, hysteresis %d, min %g)",
                scaler.scale(), cfg.precision.loss_scale.growth_factor,
                cfg.precision.loss_scale.growth_interval, cfg.precision.loss_scale.backoff_factor,
                cfg.precision.loss_scale.hysteresis, cfg.precision.loss_scale.min_scale);
  else if (scaler.mode() == LossScaleMode::static_)
    std::printf(" (static %g)", scaler.scale());
  std::printf("\n");
  const double sbh = double(B) * T * mc.d_model, as2b = double(mc.n_heads) * T * T * B;
  const double full_layer = (16 * sbh + as2b) * double(dtype_size(o.act_dtype));
  int recomputed = 0;
  for (int l = 0; l < mc.n_layers; ++l) recomputed += model.layer_recomputed(l);
  std::printf("  recompute  %s", name(cfg.recompute.policy));
  if (o.recompute == RecomputePolicy::every_k) std::printf(" (k = %d)", o.recompute_k);
  if (o.recompute == RecomputePolicy::selective)
    std::printf(": every block keeps its matrix products' outputs; LayerNorm and GELU outputs "
                "and attention probabilities are rebuilt in backward");
  else if (recomputed > 0)
    std::printf(": %d of %d blocks keep only their input and are rebuilt in backward", recomputed,
                mc.n_layers);
  std::printf(
      "\n  act est.   Korthikanti et al. 2022 (no dropout): %.2f MiB per block kept whole; "
      "%.2f MiB for the %d blocks under this policy (measured arena peak: `act` in each step "
      "line)\n",
      full_layer / 1048576.0, activation_estimate_bytes(cfg) / 1048576.0, mc.n_layers);
}

}  // namespace

TrainOutcome train(const Config& cfg, Communicator* comm) {
  GradSync sync(comm, cfg.comm);
  const int rank = sync.rank(), world = sync.world();
  validate_for_world(cfg, world);
  const bool lead = rank == 0;
  const ModelConfig& mc = cfg.model;
  const int B = cfg.train.micro_batch, T = mc.seq_len, accum = cfg.train.grad_accum_steps;

  // Inputs first: a bad data file must fail before anything is written.
  // The trace window, clipped to the run; a window past the end is a warning, not an error:
  // `--set train.steps=3` on a config that traces steps 5-7 should still run.
  std::vector<int> window = cfg.profile.trace_steps;
  std::string trace_note;
  if (!window.empty() && window[0] > cfg.train.steps) {
    trace_note = "profile.trace_steps [" + std::to_string(window[0]) + ", " +
                 std::to_string(window[1]) +
                 "] lies outside the run (train.steps = " + std::to_string(cfg.train.steps) +
                 "): no trace will be written";
    window.clear();
  } else if (!window.empty() && window[1] > cfg.train.steps) {
    window[1] = cfg.train.steps;
  }
  std::unique_ptr<DataSource> data = make_data_source(cfg, "train", rank, world);
  Evaluator eval{
      make_data_source(cfg, "val", rank, world), std::max(1, cfg.train.eval_batches), B, T,
      std::vector<int32_t>(size_t(B) * T),       std::vector<int32_t>(size_t(B) * T)};
  const DataInfo info = data_info(cfg);

  const int threads = resolve_threads(cfg.run.threads, local_rank_count());
  set_compute_threads(threads);
  const DType act_dtype = cfg.precision.dtype;
  // The peak of the kernel the matrix products run on (docs/metrics.md), per rank.
  auto measure_peak = [&] {
    return cfg.profile.peak_gflops > 0
               ? cfg.profile.peak_gflops
               : measure_matmul_peak_gflops(act_dtype, 2048, 5, threads) * threads;
  };
  const double peak_gflops = measure_peak();

  const GptOptions gopt{act_dtype, cfg.recompute.policy, cfg.recompute.k};
  Gpt model(mc, gopt);
  model.init(cfg.run.seed);
  LossScaler scaler(cfg.precision);
  const std::string scale_warning = loss_scale_warning(cfg.precision);
  AdamW opt(model.registry(), {cfg.optimizer.betas[0], cfg.optimizer.betas[1], cfg.optimizer.eps,
                               cfg.train.weight_decay});
  LrSchedule sched{cfg.train.schedule, cfg.train.lr, cfg.train.min_lr_ratio, cfg.train.warmup_steps,
                   cfg.train.steps};
  Arena arena(model.arena_bytes(B, T) + 4096);
  sync.setup(model);
  if (world > 1) sync.check_replicas(model.params().data(), model.params().size(), 0);

  RunDir run(cfg.run.out_dir);
  if (lead) {
    run.create();
    write_file_atomic(run.path("config.yaml"), config_to_yaml(cfg));
  }

  const double flops_per_token = model.model_flops_per_token();
  const double hw_flops_per_token = flops_per_token + model.recompute_flops_per_token();
  const double tokens_per_step = double(B) * T * accum * world;
  const size_t param_bytes = model.params().bytes();
  if (lead) {
    std::printf("ringstep train: %s (config %s)\n", cfg.run.name.c_str(),
                cfg.source_path.empty() ? "defaults" : cfg.source_path.c_str());
    std::printf(
        "  model      GPT %d layers, d_model %d, %d heads, seq %d, vocab %d: %s params "
        "(%s without position embeddings)\n",
        mc.n_layers, mc.d_model, mc.n_heads, mc.seq_len, mc.vocab_size,
        human_count(double(model.param_count())).c_str(),
        human_count(double(model.flops_param_count())).c_str());
    std::printf(
        "  flops      %.3f MFLOP/token model (6N + 6LCT: causal attention counted once, "
        "N without position embeddings)\n",
        flops_per_token / 1e6);
    if (std::isnan(info.entropy_rate))
      std::printf("  data       %s\n", data->describe().c_str());
    else
      std::printf(
          "  data       %s\n             entropy rate %.4f nats/token, floor for a "
          "%d-token window %.4f nats/token\n",
          data->describe().c_str(), info.entropy_rate, T, info.window_floor);
    std::printf("  batch      %d micro x %d accum x %d ranks = %d sequences = %.0f tokens/step\n",
                B, accum, world, B * accum * world, tokens_per_step);
    std::printf("  compute    %d ranks, %d threads/rank, %s, peak %.1f GFLOP/s/rank (%s)\n", world,
                threads, blas_description().c_str(), peak_gflops,
                cfg.profile.peak_gflops > 0
                    ? "from config"
                    : (std::string("measured: 1-thread ") +
                       (act_dtype == DType::f32 ? "SGEMM" : cpu::gemm16_kernel(act_dtype)) +
                       " x threads")
                          .c_str());
    std::printf(
        "  memory     params %.2f MiB, grads %.2f MiB, AdamW %.2f MiB, activation arena "
        "%.2f MiB reserved\n",
        param_bytes / 1048576.0, param_bytes / 1048576.0, opt.state_bytes() / 1048576.0,
        arena.capacity_bytes() / 1048576.0);
    print_precision_header(cfg, model, scaler, B, T);
    if (!scale_warning.empty()) std::printf("  warning    %s\n", scale_warning.c_str());
    if (world > 1) {
      std::printf("  comm       %s AllReduce over %s, %zu buckets of <= %.2f MiB, overlap %s\n",
                  name(cfg.comm.allreduce), name(cfg.comm.backend), sync.buckets().size(),
                  cfg.comm.bucket_mb, cfg.comm.overlap ? "on" : "off");
      if (cfg.comm.link.bandwidth_gbps > 0 || cfg.comm.link.latency_us > 0)
        std::printf("  LINK EMULATION ON: every message paced to %.1f Gb/s, %.1f us latency\n",
                    cfg.comm.link.bandwidth_gbps, cfg.comm.link.latency_us);
    }
    if (!window.empty())
      std::printf("  trace      steps %d-%d -> %s/trace/rank-R.json\n", window[0], window[1],
                  cfg.run.out_dir.c_str());
    if (!trace_note.empty()) std::printf("  warning    %s\n", trace_note.c_str());
    std::printf("  run dir    %s\n", cfg.run.out_dir.c_str());
    std::fflush(stdout);
  }

  std::vector<int32_t> inputs(size_t(B) * T * accum), targets(size_t(B) * T * accum);
  TrainOutcome out;
  std::vector<double> step_ms_all;
  double comm_ms_total = 0, comm_exposed_total = 0, step_ms_total = 0;
  float last_val = NAN;
  TraceRecorder trace;
  StepTimer timer(cfg.profile.enabled);
  const auto t_loop = SteadyClock::now();
  // Every rank sees the same agreed flags, so every rank stops at the same step.
  for (int step = 0; step < cfg.train.steps && !scaler.should_stop(); ++step) {
    const bool traced =
        timer.enabled() && !window.empty() && step + 1 >= window[0] && step + 1 <= window[1];
    // Adds the phase that began at T0 to its field and, inside the trace window, to the trace.
    auto phase = [&](double PhaseTimes::*field, const char* name, int64_t t0) {
      const int64_t t1 = timer.add(field, t0);
      if (traced) trace.span(Lane::compute, name, t0, t1, step + 1);
    };
    timer.begin_step();
    model.grads().zero();
    double loss_sum = 0;
    for (int micro = 0; micro < accum; ++micro) {
      int32_t* in = inputs.data() + size_t(micro) * B * T;
      int32_t* tg = targets.data() + size_t(micro) * B * T;
      int64_t t0 = timer.mark();
      data->next_batch(in, tg, B, T);
      phase(&PhaseTimes::data, "data", t0);
      t0 = timer.mark();
      loss_sum += model.forward(in, tg, B, T, arena);
      phase(&PhaseTimes::forward, "forward", t0);
      t0 = timer.mark();
      const bool last = micro == accum - 1;
      // The loss of each micro-batch is divided by grad_accum_steps and multiplied by the
      // loss scale (1 unless fp16 scaling is on).
      model.backward(float(scaler.scale() / accum), arena, last ? sync.layer_hook() : nullptr);
      phase(&PhaseTimes::backward, "backward", t0);
      timer.add_ms(&PhaseTimes::recompute, model.last_recompute_ms());
    }
    const int64_t t_wait = timer.mark();
    const GradSync::Result red = sync.finish();  // waits; gradients averaged over ranks
    if (traced && world > 1) {
      trace.span(Lane::compute, "wait comm", t_wait, timer.mark(), step + 1);
      for (const CommSpan& s : red.spans)
        trace.span(Lane::comm, s.op + " bucket " + std::to_string(s.tag), s.start_ns, s.end_ns,
                   step + 1, s.bytes);
    }

    int64_t t0 = timer.mark();
    // Loss scaler (docs/precision.md): unscale and look for inf/NaN in one pass, agree on
    // the flag across ranks, then step or skip. A skipped step leaves the parameters, the
    // moments, Adam's step count and the LR schedule's position as they were.
    const double scale_used = scaler.scale();
    const bool found_local = scaler.unscale_and_check(model.grads().data(), model.grads().size());
    const bool found = sync.any_rank(found_local);
    phase(&PhaseTimes::optimizer, "unscale + check", t0);
    const bool applied = scaler.update(found);
    const double lr = sched.at(int(opt.step_count()));
    double norm = NAN;
    t0 = timer.mark();
    if (applied) {
      norm = std::sqrt(sum_squares(model.grads().data(), model.grads().size()));
      opt.step(model.params().data(), model.grads().data(), lr,
               clip_coefficient(norm, cfg.train.grad_clip));
      phase(&PhaseTimes::optimizer, "optimizer", t0);
    }
    out.loss_scales.push_back(scale_used);
    if (traced && step + 1 == window[1])
      trace.write(cfg.run.out_dir + "/trace/rank-" + std::to_string(rank) + ".json", rank);
    const PhaseTimes& pt = timer.end_step(red.comm_ms, red.exposed_ms);
    if (cfg.train.check_replicas_every > 0 && (step + 1) % cfg.train.check_replicas_every == 0)
      sync.check_replicas(model.params().data(), model.params().size(), step + 1);
    const bool log_step = (step + 1) % cfg.profile.log_every == 0 || step + 1 == cfg.train.steps;
    const bool do_eval = cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0 &&
                         step + 1 < cfg.train.steps;
    if (do_eval) last_val = eval.run(model, arena);
    if (!timer.enabled()) {
      // Profiler off: no per-step gathers, records or timings; the loss every log_every steps.
      if (log_step) {
        const float loss = sync.agree(float(loss_sum / accum), pt).mean_loss;
        out.losses.push_back(loss);
        if (lead)
          std::printf("step %d/%d | loss %.4f | lr %.2e%s (profiler off)\n", step + 1,
                      cfg.train.steps, loss, lr, applied ? "" : " | SKIPPED");
      }
      continue;
    }
    // Times of a multi-rank run are those of the slowest rank (DESIGN.md).
    const GradSync::StepView view = sync.agree(float(loss_sum / accum), pt);
    const float loss = view.mean_loss;
    out.losses.push_back(loss);

    const PhaseTimes& slow = view.slowest;
    const double step_ms = slow.step;
    step_ms_all.push_back(step_ms);
    step_ms_total += step_ms;
    comm_ms_total += slow.comm;
    comm_exposed_total += slow.comm_exposed;
    const double tok_s = tokens_per_step / (step_ms / 1e3);
    const double gflops = flops_per_token * tok_s / 1e9 / world;  // per rank
    const double mfu = gflops / peak_gflops;
    const double hw_gflops = hw_flops_per_token * tok_s / 1e9 / world;
    if (lead) {
      json rec;
      rec["step"] = step + 1;
      rec["loss"] = loss;
      if (do_eval) rec["val_loss"] = last_val;
      rec["lr"] = lr;
      rec["tokens"] = tokens_per_step;
      rec["grad_norm"] = applied ? json(norm) : json(nullptr);  // not computed when skipped
      rec["loss_scale"] = scale_used;
      rec["skipped"] = !applied;
      rec["time_ms"] = {{"step", round_to(slow.step, 1e-3)},
                        {"data", round_to(slow.data, 1e-3)},
                        {"forward", round_to(slow.forward, 1e-3)},
                        {"backward", round_to(slow.backward, 1e-3)},
                        {"recompute", round_to(slow.recompute, 1e-3)},
                        {"optimizer", round_to(slow.optimizer, 1e-3)},
                        {"comm", round_to(slow.comm, 1e-3)},
                        {"comm_exposed", round_to(slow.comm_exposed, 1e-3)},
                        {"other", round_to(slow.other, 1e-3)}};
      rec["ranks"] = view.ranks;
      rec["tokens_per_s"] = round_to(tok_s, 0.1);
      rec["model_gflops"] = round_to(gflops, 1e-3);
      rec["mfu"] = round_to(mfu, 1e-4);
      rec["hardware_gflops"] = round_to(hw_gflops, 1e-3);
      rec["comm_bytes"] = red.bytes;
      // Achieved bus bandwidth of the gradient reduction (nccl-tests' busbw, docs/metrics.md).
      rec["comm_busbw_gbs"] =
          slow.comm > 0
              ? round_to(double(red.bytes) / (slow.comm / 1e3) / 1e9 * 2.0 * (world - 1) / world,
                         1e-4)
              : 0.0;
      rec["mem_bytes"] = {{"params", param_bytes},
                          {"grads", param_bytes},
                          {"optimizer", opt.state_bytes()},
                          {"activations_peak", arena.peak_bytes()}};
      run.append_step(rec.dump());
      if (log_step) {
        std::printf("step %d/%d | loss %.4f", step + 1, cfg.train.steps, loss);
        if (do_eval) std::printf(" | val %.4f", last_val);
        std::printf(" | lr %.2e", lr);
        if (applied)
          std::printf(" | gnorm %.3f", norm);
        else
          std::printf(" | SKIPPED (inf/NaN gradients)");
        if (scaler.mode() != LossScaleMode::none) std::printf(" | scale %g", scale_used);
        std::printf(" | %.1f ms (data %.1f fwd %.1f bwd %.1f", slow.step, slow.data, slow.forward,
                    slow.backward);
        if (slow.recompute > 0) std::printf(" [recompute %.1f]", slow.recompute);
        std::printf(
            " opt %.1f comm %.1f exposed %.1f) | %s tok/s | %.1f GFLOP/s | MFU %.1f%% | act "
            "%.1f MiB\n",
            slow.optimizer, slow.comm, slow.comm_exposed, human_count(tok_s).c_str(), gflops,
            100 * mfu, arena.peak_bytes() / 1048576.0);
        if (view.straggler >= 0)
          std::printf("  straggler: rank %d busy %.0f%% above the median for %d+ steps in a row\n",
                      view.straggler, 100 * (view.straggler_ratio - 1), GradSync::kStragglerSteps);
        std::fflush(stdout);
      }
    }
  }
  const std::string stop_reason = scaler.should_stop() ? scaler.stop_message() : "";

  const double loop_s = std::chrono::duration<double>(SteadyClock::now() - t_loop).count();
  out.final_val_loss = eval.run(model, arena);
  // This machine's speed drifts (shared host): the peak is measured again after the run
  // and the summary's MFU divides by the larger of the two, so it is never flattered by a
  // slow moment at start-up.
  const double peak_end = measure_peak();
  const double peak_best = std::max(peak_gflops, peak_end);
  if (lead) {
    // Steady state: the first steps (page faults, warm caches) are left out of the
    // percentiles when the run is long enough.
    const size_t warm = size_t(warmup_steps_excluded(int(step_ms_all.size())));
    std::vector<double> steady(step_ms_all.begin() + warm, step_ms_all.end());
    // Wall time of the whole loop (evaluations included), the same with the profiler on or
    // off: what the profiler-overhead benchmark compares.
    const double wall_tok_s = tokens_per_step * double(out.loss_scales.size()) / loop_s;
    const double p50 = steady.empty() ? 0.0 : percentile(steady, 0.5);
    const double tok_s = steady.empty() ? wall_tok_s : tokens_per_step / (p50 / 1e3);
    json sum;
    sum["profile_enabled"] = cfg.profile.enabled;
    sum["steps"] = int(out.loss_scales.size());
    sum["world"] = world;
    sum["threads"] = threads;
    sum["final_loss"] = out.losses.empty() ? 0.0f : out.losses.back();
    sum["final_val_loss"] = out.final_val_loss;
    sum["entropy_rate"] = std::isnan(info.entropy_rate) ? json(nullptr) : json(info.entropy_rate);
    sum["entropy_floor"] = std::isnan(info.window_floor) ? json(nullptr) : json(info.window_floor);
    sum["skipped_steps"] = scaler.state().skipped_total;
    sum["optimizer_steps"] = opt.step_count();
    sum["precision"] = name(cfg.precision.dtype);
    sum["loss_scale_mode"] = name(scaler.mode());
    sum["loss_scale_final"] = scaler.scale();
    sum["recompute"] = name(cfg.recompute.policy);
    sum["stopped_early"] = stop_reason.empty() ? json(nullptr) : json(stop_reason);
    sum["warmup_steps_excluded"] = warm;
    sum["step_ms_p50"] = p50;
    sum["step_ms_p90"] = percentile(steady, 0.9);
    sum["tokens_per_s"] = tok_s;
    sum["model_gflops"] = flops_per_token * tok_s / 1e9 / world;
    sum["peak_gflops"] = peak_best;
    sum["peak_gflops_start"] = peak_gflops;
    sum["peak_gflops_end"] = peak_end;
    sum["mfu"] = flops_per_token * tok_s / 1e9 / world / peak_best;
    sum["comm_exposed_frac"] = step_ms_total > 0 ? comm_exposed_total / step_ms_total : 0.0;
    // Overlap = 1 - exposed / in flight, over the whole run (DESIGN.md); null with no comm.
    sum["overlap"] = comm_ms_total > 0 ? json(1.0 - comm_exposed_total / comm_ms_total) : json(nullptr);
    sum["activations_peak_bytes"] = arena.peak_bytes();
    sum["loop_wall_s"] = loop_s;
    sum["tokens_per_s_wall"] = wall_tok_s;
    write_file_atomic(run.path("summary.json"), sum.dump(2) + "\n");
    std::printf("done: %zu steps | final loss %.4f | val loss %.4f", out.loss_scales.size(),
                double(sum["final_loss"]), out.final_val_loss);
    if (!std::isnan(info.window_floor))
      std::printf(" | floor %.4f (gap %.4f nats)", info.window_floor,
                  out.final_val_loss - info.window_floor);
    std::printf(
        " | step p50 %.1f ms | %s tok/s | MFU %.1f%% (peak %.1f GFLOP/s: %.1f at start, "
        "%.1f at end)\n",
        p50, human_count(tok_s).c_str(), 100.0 * double(sum["mfu"]), peak_best, peak_gflops,
        peak_end);
    std::printf(
        "  activations: arena peak %.2f MiB measured; Korthikanti et al. estimate %.2f MiB for "
        "the blocks (%s, recompute %s); the arena also holds embeddings, logits and backward's "
        "buffers\n",
        arena.peak_bytes() / 1048576.0, activation_estimate_bytes(cfg) / 1048576.0,
        name(cfg.precision.dtype), name(cfg.recompute.policy));
    if (scaler.state().skipped_total > 0)
      std::printf("  skipped %lld of %zu steps (inf/NaN gradients); loss scale now %g\n",
                  static_cast<long long>(scaler.state().skipped_total), out.loss_scales.size(),
                  scaler.scale());
    std::printf("  wrote %s/{config.yaml,steps.jsonl,summary.json}\n", cfg.run.out_dir.c_str());
  }
  out.optimizer_steps = opt.step_count();
  out.params_fnv1a64 = fnv1a64(model.params().data(), model.params().bytes());
  out.skipped_steps = int(scaler.state().skipped_total);
  if (!stop_reason.empty()) throw TrainingStopped(stop_reason);
  return out;
}

}  // namespace ringstep
