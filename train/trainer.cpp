#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "comm/agree.h"
#include "core/checksum.h"
#include "core/device_clock.h"
#include "core/error.h"
#include "core/files.h"
#include "core/op_cost.h"
#include "core/runtime.h"
#include "core/threads.h"
#include "optim/clip.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/preempt.h"

namespace ringstep {
namespace {

// The peak of the kernel the matrix products run on (docs/metrics.md), per rank: the
// config's, or the runtime's (the GPU's datasheet number, or measured on the CPU).
Peak run_peak(const Config& cfg, DType act_dtype, int threads) {
  if (cfg.profile.peak_gflops > 0) return {cfg.profile.peak_gflops, "from config"};
  return runtime(cfg.run.device).peak(act_dtype, cfg.precision.tf32, threads);
}

// The trace window clipped to the run. A window past the end is a warning, not an error:
// `--set train.steps=3` on a config that traces steps 5-7 should still run.
void clip_trace_window(const Config& cfg, RunFacts& f) {
  f.trace_window = cfg.profile.trace_steps;
  std::vector<int>& w = f.trace_window;
  if (!w.empty() && w[0] > cfg.train.steps) {
    f.trace_note = "profile.trace_steps [" + std::to_string(w[0]) + ", " + std::to_string(w[1]) +
                   "] lies outside the run (train.steps = " + std::to_string(cfg.train.steps) +
                   "): no trace will be written";
    w.clear();
  } else if (!w.empty() && w[1] > cfg.train.steps) {
    w[1] = cfg.train.steps;
  }
}

// Checks the config (a caller may have changed it after loading), what depends on the
// world size and that run.device is usable here, before anything else is built.
const Config& checked(const Config& cfg, int world) {
  check_config(cfg);
  validate_for_world(cfg, world);
  runtime(cfg.run.device, "run.device");
  return cfg;
}

// Device marks a log interval makes (Trainer::timed's phases and the step's two): data,
// forward and backward per micro-batch, unscale + check and the update.
size_t device_marks(const Config& cfg) {
  return size_t(cfg.profile.log_every) * (2 + 2 * (3 * size_t(cfg.train.grad_accum_steps) + 2));
}

// A test-only fault (profile.inject_*, configs/sick/): sleep MS milliseconds.
void inject_delay(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

}  // namespace

TrainState::TrainState(const Registry& params, const Config& cfg,
                       std::unique_ptr<DataSource> train_data)
    : scaler(cfg.precision),
      optimizer(make_optimizer(
          params, cfg, scaler.mode() != LossScaleMode::none || cfg.train.on_nan == OnNan::skip)),
      data(std::move(train_data)) {}

Trainer::Trainer(const Config& cfg, Communicator* comm, DeviceComm* device_comm)
    : cfg_(cfg),
      sync_(comm, cfg.comm, resolve_threads(cfg.run.threads, local_rank_count()), device_comm),
      // Inputs first: a bad data file must fail before anything is written.
      val_data_(make_data_source(checked(cfg_, sync_.world()), "val", sync_.rank(), sync_.world())),
      model_(cfg.model, gpt_options(cfg), cfg.run.device),
      arena_(model_.count_arena_bytes(cfg.train.micro_batch, cfg.model.seq_len), cfg.run.device),
      state_(model_.registry(), cfg, make_data_source(cfg, "train", sync_.rank(), sync_.world())),
      schedule_{cfg.train.schedule, cfg.train.lr, cfg.train.min_lr_ratio, cfg.train.warmup_steps,
                cfg.train.steps},
      timer_(cfg.profile.enabled),
      run_dir_(cfg.run.out_dir),
      inputs_(size_t(cfg.train.micro_batch) * cfg.model.seq_len * cfg.train.grad_accum_steps),
      targets_(inputs_.size()),
      last_val_loss_(NAN) {
  RunFacts& f = facts_;
  f.rank = sync_.rank();
  f.world = sync_.world();
  f.data = data_info(cfg);
  f.data_description = state_.data->describe();
  clip_trace_window(cfg, f);
  f.threads = resolve_threads(cfg.run.threads, local_rank_count());
  set_compute_threads(f.threads);
  const DType act = model_.options().act_dtype;
  Peak peak = run_peak(cfg, act, f.threads);
  f.peak_gflops = peak.gflops;
  f.peak_source = std::move(peak.source);
  timer_.time_on_device(runtime(cfg.run.device).make_clock(device_marks(cfg)));
  model_.init(cfg.run.seed);
  // Each rank reads the checkpoint itself; a bad one is reported once for all of them.
  agree_on_inputs(f.rank, [&](uint64_t v) { return sync_.gather(v); }, [&] {
    resumed_from_ = find_resume_checkpoint(cfg_, f.rank == 0);
    if (resumed_from_.empty()) {
      check_run_dir_free(cfg_);
      if (!cfg.train.init_from.empty()) init_from(cfg.train.init_from, f.rank == 0);
    } else {
      load_checkpoint(resumed_from_, cfg_, f.rank, f.world, model_.params(), state_);
    }
  });
  StepRule rule{.scaler = state_.scaler.rule(),
                .schedule = schedule_,
                .grad_clip = cfg.train.grad_clip,
                .grad_accum_steps = cfg.train.grad_accum_steps,
                .stop_on_bad = bad_step_stops()};
  if (f.world == 1 && state_.optimizer->fill_deferred_rule(rule)) {
    deferred_ =
        std::make_unique<DeferredSteps>(model_.params().runtime(), rule, cfg.profile.log_every);
    deferred_->load(state_.scaler.state(), state_.optimizer->step_count());
  }
  sync_.setup(model_);
  if (f.world > 1) {
    if (state_.optimizer->replicas_agree())
      sync_.check_replicas(std::as_const(model_).params(), 0);
    f.network.interface = traffic_interface(
        f.rank, f.world, [this](void* buf, size_t n) { sync_.gather_bytes(buf, n); });
    f.network.start = read_net_snapshot(f.network.interface);
  }
  f.flops_per_token = model_.model_flops_per_token();
  f.hw_flops_per_token = f.flops_per_token + model_.recompute_flops_per_token();
  f.tokens_per_step = double(inputs_.size()) * f.world;
  f.param_bytes = model_.params().bytes();
  f.optimizer_bytes = state_.optimizer->state_bytes();
  f.arena_bytes = arena_.capacity_bytes();
  f.weight_copy_bytes = model_.weight_copy_bytes();
  f.buckets = sync_.buckets().size();
  if (f.rank == 0) {
    // Every rank has chosen its checkpoint (check_replicas above waited for all of them).
    if (resumed_from_.empty()) run_dir_.clear_earlier_run();
    totals_.resume(run_dir_.create(state_.step), state_.step);
    if (!resumed_from_.empty())
      std::printf("resuming from %s (step %d)\n", resumed_from_.c_str(), state_.step);
    write_file_atomic(run_dir_.path("config.yaml"), config_to_yaml(cfg));
    print_header(cfg, f, model_, state_.scaler);
  }
}

Trainer::~Trainer() = default;

// train.init_from: the weights of a checkpoint, of a run directory's newest checkpoint, or
// of a safetensors file; the optimizer, the scaler and the data start afresh.
void Trainer::init_from(const std::string& path, bool lead) {
  std::string from = path;
  try {
    if (input_exists(path, "train.init_from") && std::filesystem::is_regular_file(path)) {
      import_safetensors(path, model_);
    } else {
      from = checkpoint_at(path);
      load_checkpoint_params(from, cfg_, model_.params());
    }
  } catch (const InputError& e) {
    throw InputError("train.init_from: " + std::string(e.what()));
  }
  if (lead) std::printf("initialised the weights from %s\n", from.c_str());
}

template <class F>
auto Trainer::timed(double PhaseTimes::*field, const char* name, bool traced, F&& f) {
  const StepTimer::PhaseStart t0 = timer_.begin_phase();
  auto finish = [&] {
    const int64_t t1 = timer_.end_phase(field, t0);
    if (traced) trace_.span(Lane::compute, name, t0.ns, t1, state_.step + 1);
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    finish();
  } else {
    auto result = f();
    finish();
    return result;
  }
}

OpPhaseScope Trainer::op_scope(OpPhase phase, bool traced) {
  return OpPhaseScope(model_.op_clock(), ops_, phase, traced ? &trace_ : nullptr, state_.step + 1);
}

// One optimizer step: accumulate the gradients of grad_accum_steps micro-batches, average
// them over ranks (unless the optimizer exchanges its own state instead: each rank then
// keeps its own), unscale and agree on inf/NaN, then update (or skip) and advance.
Trainer::StepResult Trainer::step() {
  const std::vector<int>& w = facts_.trace_window;
  const int number = state_.step + 1;
  const bool traced = timer_.enabled() && !w.empty() && number >= w[0] && number <= w[1];
  const int op_every = cfg_.profile.op_every;
  StepResult s;
  const bool op_timed = timer_.enabled() && op_every > 0 && (traced || number % op_every == 0);
  ops_ = op_timed ? &s.ops : nullptr;
  Optimizer& opt = *state_.optimizer;
  s.stage = opt.stage(facts_.world);
  const bool averaged = opt.wants_allreduce(facts_.world);
  s.loss_scale = state_.scaler.scale();
  // Before the window's first step, and outside it: the moment the ranks' traces align on.
  if (traced && number == w[0]) {
    if (facts_.world > 1) sync_.gather(0);
    trace_.set_clock_sync(steady_now_ns());
  }
  timer_.begin_step();
  model_.grads().zero();
  DeferredStep* decided = deferred_ ? deferred_->begin(int(unlogged_.size())) : nullptr;
  // The optimizer's own exchange may start under backward, each part as backward finishes
  // it, with the gradients unscaled and clipped by the previous step's coefficient.
  const bool under_backward =
      !averaged && opt.begin_under_backward(model_.grads().data(),
                                            previous_clip_coefficient() / s.loss_scale, sync_);
  double loss_sum = 0;
  for (int micro = 0; micro < cfg_.train.grad_accum_steps; ++micro)
    loss_sum += micro_batch(micro, traced, averaged || under_backward, decided);
  s.loss = loss_sum / cfg_.train.grad_accum_steps;
  const int64_t wait_start = timer_.mark();
  if (averaged) {
    s.comm = sync_.finish();  // gradients averaged over ranks (on a device: queued)
    if (traced) trace_comm(s.comm, wait_start);
  }
  if (under_backward)
    timed(&PhaseTimes::optimizer, "wait comm", traced, [&] { sync_.wait_sign_sent(); });

  if (decided) {
    queue_deferred_update(traced, decided);  // its loss, scale, lr and norm: read_deferred()
  } else {
    const int bad_rank = unscale_and_agree(traced, s.loss);
    if (bad_rank >= 0) fault_ = numerical_fault(number, bad_rank);
    s.applied = state_.scaler.update(bad_rank >= 0);
    s.lr = schedule_.at(int(opt.step_count()));
    if (s.applied) {
      s.grad_norm = timed_update(s.lr, traced, averaged, s.exchange);
      state_.last_grad_norm = s.grad_norm;
    } else {
      s.grad_norm = NAN;
      s.exchange = opt.skip(sync_);  // a skipped step leaves the optimizer's state as it was
    }
  }
  if (const std::string note = opt.take_note(); !note.empty() && facts_.rank == 0)
    std::printf("%s\n", note.c_str());
  if (!averaged) {
    s.comm = sync_.take_exchange();
    timer_.add_ms(&PhaseTimes::optimizer, -s.comm.exposed_ms);  // the wait is comm_exposed
    if (traced) trace_comm(s.comm, 0);
  }
  // comm.backend nccl: the step's comm from the device's marks (train/grad_sync.h).
  if (averaged && sync_.settle(s.comm) && traced) trace_comm(s.comm, 0);
  if (facts_.rank == facts_.world - 1) inject_delay(cfg_.profile.inject_delay_ms);
  s.times = timer_.end_step(s.comm.comm_ms, s.comm.exposed_ms);
  // After the step's clock has stopped: the profiler's own writing is not the step's time.
  if (traced && number == w[1])
    trace_.write(trace_path(), facts_.rank);
  ops_ = nullptr;
  ++state_.step;
  const int every = cfg_.train.check_replicas_every;
  if (every > 0 && state_.step % every == 0 && state_.optimizer->replicas_agree())
    sync_.check_replicas(std::as_const(model_).params(), state_.step);
  return s;
}

// Forward and backward of micro-batch MICRO; returns its loss. The loss is divided by
// grad_accum_steps and multiplied by the loss scale (1 unless fp16 scaling is on) before
// backward; with HOOK, the last micro-batch hands each finished layer to the gradient sync.
double Trainer::micro_batch(int micro, bool traced, bool hook, DeferredStep* decided) {
  const int B = cfg_.train.micro_batch, T = cfg_.model.seq_len;
  int32_t* in = inputs_.data() + size_t(micro) * B * T;
  int32_t* tg = targets_.data() + size_t(micro) * B * T;
  const bool last = hook && micro == cfg_.train.grad_accum_steps - 1;
  timed(&PhaseTimes::data, "data", traced, [&] {
    state_.data->next_batch(in, tg, B, T);
    inject_delay(cfg_.profile.inject_data_delay_ms);
  });
  const float loss = timed(&PhaseTimes::forward, "forward", traced, [&] {
    auto ops = op_scope(OpPhase::forward, traced);
    if (!decided) return model_.forward(in, tg, B, T, arena_);
    model_.forward(in, tg, B, T, arena_, &decided->loss_sum);
    return 0.0f;
  });
  timed(&PhaseTimes::backward, "backward", traced, [&] {
    auto ops = op_scope(OpPhase::backward, traced);
    const std::function<void(int)> hook_fn = last ? sync_.unit_hook() : nullptr;
    if (decided)
      model_.backward(deferred_->seed(), arena_, hook_fn);
    else
      model_.backward(float(state_.scaler.scale() / cfg_.train.grad_accum_steps), arena_, hook_fn);
  });
  timer_.add_ms(&PhaseTimes::recompute, model_.last_recompute_ms());
  return loss;
}

// The optimizer's update (with its own exchange, if any: EXCHANGE), timed as the optimizer
// op on an op-timed step; returns the gradient norm. The trace shows it once, as the
// "optimizer" phase, not again as an op of the same span.
double Trainer::timed_update(double lr, bool traced, bool averaged, SignExchange& exchange) {
  auto ops = op_scope(OpPhase::optimizer, /*traced=*/false);
  const int64_t t0 = model_.op_clock().begin();
  const double norm = apply_update(lr, traced, averaged, exchange);
  model_.op_clock().end(Op::optimizer, t0, op_cost::optimizer_update(double(model_.param_count())));
  return norm;
}

// The loss scaler's check (docs/precision.md): unscale and look for inf/NaN in one pass
// (and in LOSS), then agree across ranks on the lowest rank that found one (-1: none). A
// skipped step leaves the parameters, the moments, Adam's step count and the LR schedule's
// position as they were.
int Trainer::unscale_and_agree(bool traced, double loss) {
  FlatBuffer& g = model_.grads();
  return timed(&PhaseTimes::optimizer, "unscale + check", traced, [&] {
    const bool bad = state_.scaler.unscale_and_check(g) || !std::isfinite(loss);
    return sync_.first_rank(bad);
  });
}

// The check, the norm, the loss scaler's decision and the update, queued on the runtime;
// nothing here waits for it. Timed as the host's sequence is: the update (norm included)
// as the optimizer op.
void Trainer::queue_deferred_update(bool traced, DeferredStep* decided) {
  FlatBuffer& g = model_.grads();
  Runtime& rt = g.runtime();
  timed(&PhaseTimes::optimizer, "unscale + check", traced,
        [&] { rt.unscale_and_flag(g.data(), g.size(), deferred_->carry(), decided); });
  auto ops = op_scope(OpPhase::optimizer, /*traced=*/false);
  const int64_t t0 = model_.op_clock().begin();
  timed(&PhaseTimes::optimizer, "optimizer", traced, [&] {
    rt.sum_squares_into(g.data(), g.size(), &decided->norm_sq);
    rt.decide(deferred_->rule(), deferred_->carry(), decided);
    state_.optimizer->step_deferred(model_.params(), g, decided);
  });
  model_.op_clock().end(Op::optimizer, t0, op_cost::optimizer_update(double(model_.param_count())));
}

void Trainer::read_deferred() {
  const DeferredSteps::Read r = deferred_->read(int(unlogged_.size()));
  size_t kept = 0;
  for (; kept < r.steps.size() && !r.steps[kept].after_stop; ++kept) {
    const DeferredStep& d = r.steps[kept];
    StepResult& s = unlogged_[kept].s;
    s.loss = d.loss_sum / cfg_.train.grad_accum_steps;
    s.loss_scale = d.scale;
    s.lr = d.lr;
    s.applied = d.applied != 0;
    s.grad_norm = s.applied ? std::sqrt(d.norm_sq) : NAN;
    if (s.applied) state_.last_grad_norm = s.grad_norm;
    if (d.bad && fault_.empty()) fault_ = numerical_fault(unlogged_[kept].step, 0);
  }
  // Steps after the one that ended the run ran, but changed nothing: as if never run.
  const int dropped = int(unlogged_.size() - kept);
  unlogged_.resize(kept);
  state_.step -= dropped;
  totals_.steps_run -= dropped;
  state_.scaler.restore(r.carry.scaler);
  state_.optimizer->set_step_count(r.carry.t);
  // A trace written at a dropped step shows steps that never counted.
  const std::vector<int>& w = facts_.trace_window;
  if (dropped > 0 && !w.empty() && state_.step < w[1]) {
    std::error_code ignored;  // nothing there, or another file left in the folder
    std::filesystem::remove(trace_path(), ignored);
    std::filesystem::remove(std::filesystem::path(trace_path()).parent_path(), ignored);
  }
}

std::string Trainer::trace_path() const {
  return cfg_.run.out_dir + "/trace/rank-" + std::to_string(facts_.rank) + ".json";
}

bool Trainer::bad_step_stops() const {
  return state_.scaler.mode() == LossScaleMode::none && cfg_.train.on_nan == OnNan::stop;
}

// Without a loss scaler (fp32, bf16, mode none) an inf/NaN is not an overflow to scale
// away but a fault: with train.on_nan: stop, the message that ends the run after this
// step's record; "" to go on (skip the step).
std::string Trainer::numerical_fault(int step, int rank) const {
  if (!bad_step_stops()) return "";
  const std::string last = newest_checkpoint(checkpoints_dir(cfg_), false);
  return "step " + std::to_string(step) +
         ": the loss or gradients are inf or NaN (first seen on rank " + std::to_string(rank) +
         "; dtype " + name(cfg_.precision.dtype) +
         ", no loss scaling to absorb it). Last good checkpoint: " +
         (last.empty() ? "none (checkpoint.every is " + std::to_string(cfg_.checkpoint.every) + ")"
                       : last) +
         ". Try a lower train.lr or a longer train.warmup_steps, check the data, or set "
         "train.on_nan: skip to skip such steps.";
}

// Clips by the global norm and runs the optimizer's step; returns the norm before clipping.
// Gradients not AVERAGED (the optimizer exchanges its own state): the norm is the root mean
// square over ranks of the local gradients' norms, one agreed coefficient (the averaged
// gradient never exists), and the optimizer's exchange wait is moved to comm_exposed by
// step(). An exchange begun under backward was clipped by the previous step's coefficient.
double Trainer::apply_update(double lr, bool traced, bool averaged, SignExchange& exchange) {
  return timed(&PhaseTimes::optimizer, "optimizer", traced, [&] {
    FlatBuffer& g = model_.grads();
    double norm;
    if (averaged) {
      norm = std::sqrt(sum_squares(g));
    } else {
      float mean_sq = float(sum_squares(g));
      sync_.average(&mean_sq, 1);
      norm = std::sqrt(double(mean_sq));
    }
    exchange = state_.optimizer->step(model_.params(), g, lr,
                                      clip_coefficient(norm, cfg_.train.grad_clip), sync_);
    return norm;
  });
}

// The clip coefficient of the last applied step's norm; 1 before any (a run resumed from a
// checkpoint that predates the field, too).
double Trainer::previous_clip_coefficient() const {
  const double norm = state_.last_grad_norm;
  return std::isnan(norm) ? 1.0 : clip_coefficient(norm, cfg_.train.grad_clip);
}

void Trainer::trace_comm(const GradSync::Result& comm, int64_t wait_start) {
  if (facts_.world <= 1) return;
  const int number = state_.step + 1;
  if (wait_start > 0) trace_.span(Lane::compute, "wait comm", wait_start, timer_.mark(), number);
  // The lane covers the record's comm (train/grad_sync.h): each collective from its start,
  // and before it, while the engine was idle, the time it took the engine to start it.
  int64_t engine_free_ns = 0;
  for (const CommSpan& s : comm.spans) {
    const int64_t waiting_from = std::max(s.queued_ns, engine_free_ns);
    if (s.start_ns > waiting_from)
      trace_.span(Lane::comm, "engine start-up", waiting_from, s.start_ns, number);
    trace_.span(Lane::comm, s.op + " bucket " + std::to_string(s.tag), s.start_ns, s.end_ns, number,
                s.bytes);
    engine_free_ns = std::max(engine_free_ns, s.end_ns);
  }
}

float Trainer::evaluate() {
  const int B = cfg_.train.micro_batch, T = cfg_.model.seq_len;
  val_data_->reset();
  double sum = 0;
  const int batches = std::max(1, cfg_.train.eval_batches);
  for (int i = 0; i < batches; ++i) {
    val_data_->next_batch(inputs_.data(), targets_.data(), B, T);
    sum += model_.evaluate(inputs_.data(), targets_.data(), B, T, arena_);
  }
  return float(sum / batches);
}

void Trainer::log_step(const StepResult& s, TrainOutcome& out) {
  unlogged_.push_back({s, state_.step, last_val_loss_});
  const int n = state_.step;
  const bool reads_once_per_interval = timer_.on_device() || deferred_;
  if (!reads_once_per_interval || n % cfg_.profile.log_every == 0 || n == cfg_.train.steps)
    flush_log(out);
}

void Trainer::flush_log(TrainOutcome& out) {
  if (timer_.on_device()) {
    const std::vector<PhaseTimes> times = timer_.read_device();
    for (size_t i = 0; i < unlogged_.size(); ++i) unlogged_[i].s.times = times.at(i);
  }
  if (deferred_) read_deferred();
  for (const Unlogged& u : unlogged_) log_record(u.s, u.step, u.val_loss, out);
  unlogged_.clear();
}

// With the profiler off: no per-step gathers, only the loss at log steps.
void Trainer::log_record(const StepResult& s, int n, float val_loss, TrainOutcome& out) {
  const int steps = cfg_.train.steps;
  const bool log_line = n % cfg_.profile.log_every == 0 || n == steps;
  const bool lead = facts_.rank == 0;
  out.loss_scales.push_back(s.loss_scale);
  if (!timer_.enabled()) {
    if (!log_line) return;
    out.losses.push_back(sync_.agree(float(s.loss), s.times, s.exchange).mean_loss);
    if (lead) print_loss_line(n, steps, out.losses.back(), s.lr, s.applied);
    return;
  }
  const GradSync::StepView view = sync_.agree(float(s.loss), s.times, s.exchange);
  out.losses.push_back(view.mean_loss);
  totals_.add(view.slowest);
  if (!lead) return;
  StepRecord r;
  r.step = n;
  r.loss = view.mean_loss;
  r.val_loss = val_loss;
  r.lr = s.lr;
  r.tokens = facts_.tokens_per_step;
  r.grad_norm = s.grad_norm;
  r.loss_scale = s.loss_scale;
  r.skipped = !s.applied;
  r.time_ms = view.slowest;
  r.ranks = view.ranks;
  const Throughput t = throughput(double(r.tokens), view.slowest.step, facts_.flops_per_token,
                                  facts_.world, facts_.peak_gflops);
  r.tokens_per_s = t.tokens_per_s, r.model_gflops = t.model_gflops, r.mfu = t.mfu;
  r.hardware_gflops = facts_.hw_flops_per_token * r.tokens_per_s / 1e9 / facts_.world;
  r.comm_bytes = s.comm.bytes;
  r.comm_sent_bytes = s.comm.sent_bytes;
  r.stage = s.stage;
  r.compression_error = view.compression_error;
  r.comm_busbw_gbs = busbw_gbs(s.comm.bytes, view.slowest.comm, facts_.world);
  r.mem_bytes = {facts_.param_bytes, facts_.param_bytes, facts_.optimizer_bytes,
                 arena_.peak_bytes()};
  r.ops = s.ops;
  r.time_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  run_dir_.append_step(record_line(r));
  if (log_line) {
    // This process's steps so far, and the rest at their pace.
    const double elapsed_s =
        std::chrono::duration<double>(SteadyClock::now() - loop_start_).count();
    const int done = n - totals_.resumed_step;
    const RunProgress progress{int64_t(n) * r.tokens, elapsed_s,
                               done > 0 ? elapsed_s / done * (steps - n) : 0.0};
    print_step_line(r, steps, state_.scaler.mode() != LossScaleMode::none, progress);
  }
  const std::string event = stragglers_.update(n, view.ranks.straggler, view.straggler_ratio);
  if (!event.empty()) std::printf("%s", event.c_str());
}

// Saves a checkpoint of the state after step state_.step (every rank calls it).
// Nothing is saved where the records just read end the run (a fault, or the loss scaler
// giving up): that state is not worth resuming.
void Trainer::save(TrainOutcome& out) {
  flush_log(out);  // the step lines before the checkpoint's
  if (!fault_.empty() || state_.scaler.should_stop()) return;
  const auto t0 = SteadyClock::now();
  out.last_checkpoint = save_checkpoint(cfg_, model_.params(), state_, sync_);
  const double ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
  totals_.checkpoint_ms.push_back(ms);
  if (facts_.rank != 0) return;
  // Every checkpoint of a run has the same files: their size is read once.
  if (totals_.checkpoint_bytes == 0)
    totals_.checkpoint_bytes = checkpoint_bytes(out.last_checkpoint);
  print_checkpoint_line(out.last_checkpoint, totals_.checkpoint_bytes, ms);
}

// What the outcome reports of the state the run ends in, however it ends.
void Trainer::record_end_state(TrainOutcome& out) const {
  out.optimizer_steps = state_.optimizer->step_count();
  out.skipped_steps = int(state_.scaler.state().skipped_total);
  FlatBuffer host_copy;
  const FlatBuffer& params = on_host(model_.params(), host_copy);
  out.params_fnv1a64 = fnv1a64(params.data(), params.bytes());
  double sq = 0;
  for (size_t i = 0; i < params.size(); ++i) sq += double(params.data()[i]) * params.data()[i];
  out.params_l2 = std::sqrt(sq);
}

// A signal asked the run to stop: save where it is and return without evaluating.
TrainOutcome Trainer::stop_preempted(TrainOutcome& out) {
  save(out);
  if (facts_.rank == 0)
    std::printf("stopped by a signal after step %d; checkpoint %s; rerun to resume\n", state_.step,
                out.last_checkpoint.c_str());
  out.preempted = true;
  record_end_state(out);
  return out;
}

TrainOutcome Trainer::run() {
  TrainOutcome out;
  out.resumed_step = state_.step;
  const int save_every = cfg_.checkpoint.every;
  // Only runs that checkpoint catch signals (and pay one agreement per step for them).
  std::optional<PreemptGuard> preempt;
  if (save_every > 0) preempt.emplace();
  loop_start_ = SteadyClock::now();
  try {
    // Every rank sees the same agreed flags, so every rank stops at the same step.
    while (state_.step < cfg_.train.steps && !state_.scaler.should_stop() && fault_.empty()) {
      const StepResult s = step();
      ++totals_.steps_run;
      const int n = state_.step, every = cfg_.train.eval_every;
      last_val_loss_ = every > 0 && n % every == 0 && n < cfg_.train.steps ? evaluate() : NAN;
      log_step(s, out);  // may read steps that end the run, and drop those after
      if (preempt && sync_.any_rank(preempt->requested())) return stop_preempted(out);
      if (save_every > 0 && state_.step % save_every == 0 && fault_.empty()) save(out);
    }
    flush_log(out);
  } catch (const SystemFault& e) {
    end_on_fault(e, out);
  }
  // The end of the run, unless the last step was just saved, or the run was resumed at its
  // end, or the scaler gave up (a state that only overflows is not worth resuming).
  const bool saved = state_.step % std::max(save_every, 1) == 0 || state_.step == out.resumed_step;
  if (save_every > 0 && !saved && !state_.scaler.should_stop() && fault_.empty()) save(out);
  RunEnd end = run_end(out, !fault_.empty()               ? fault_
                            : state_.scaler.should_stop() ? state_.scaler.stop_message()
                                                          : "");
  out.final_val_loss = end.final_val_loss = evaluate();
  end.peak_gflops_end = run_peak(cfg_, model_.options().act_dtype, facts_.threads).gflops;
  end.network = network_at_end();
  record_end_state(out);
  if (facts_.rank == 0 && end.stop_reason.empty())
    export_safetensors(model_, run_dir_.path(kFinalWeights), state_.step);
  if (facts_.rank == 0) write_summary(cfg_, facts_, totals_, state_.scaler, end);
  if (!end.stop_reason.empty()) throw TrainingStopped(end.stop_reason);
  return out;
}

std::vector<NetFacts> Trainer::network_at_end() {
  if (facts_.world <= 1) return {};
  NetFacts mine = facts_.network;
  mine.end = read_net_snapshot(mine.interface);
  return gather_net_facts(mine, facts_.rank, facts_.world,
                          [this](void* buf, size_t n) { sync_.gather_bytes(buf, n); });
}

// What the summary needs of the run's end that the loop knows (the final evaluation and the
// peak measured again are the caller's).
RunEnd Trainer::run_end(const TrainOutcome& out, std::string stop_reason) const {
  RunEnd end;
  end.stop_reason = std::move(stop_reason);
  end.loop_s = std::chrono::duration<double>(SteadyClock::now() - loop_start_).count();
  end.final_loss = out.losses.empty() ? totals_.last_loss : out.losses.back();
  end.optimizer_steps = state_.optimizer->step_count();
  end.compress_choice = state_.optimizer->compress_choice();
  end.activations_peak_bytes = arena_.peak_bytes();
  return end;
}

// A fault of the machine mid-run (a full disk, a directory made read-only, a file removed):
// the summary of the steps that ran is still written where it can be (nothing that needs
// the other ranks: they may be gone), else its `done:` lines are printed; then FAULT goes on.
[[noreturn]] void Trainer::end_on_fault(const SystemFault& fault, const TrainOutcome& out) {
  RunEnd end = run_end(out, fault.what());
  end.final_val_loss = NAN;
  end.peak_gflops_end = facts_.peak_gflops;
  if (facts_.rank == 0) {
    try {
      write_summary(cfg_, facts_, totals_, state_.scaler, end);
    } catch (const SystemFault& again) {
      std::fprintf(stderr, "ringstep: summary.json not written either: %s\n", again.what());
    }
  }
  throw fault;
}

TrainOutcome train(const Config& cfg, Communicator* comm, DeviceComm* device_comm) {
  return Trainer(cfg, comm, device_comm).run();
}

}  // namespace ringstep
