#include "train/grad_sync.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "comm/bench.h"
#include "comm/communicator.h"
#include "comm/device_comm.h"
#include "comm/device_sign_allreduce.h"
#include "comm/engine.h"
#include "comm/sign_allreduce.h"
#include "core/checksum.h"
#include "core/runtime.h"
#include "core/stats.h"
#include "core/threads.h"
#include "models/gpt.h"

namespace ringstep {

std::vector<Bucket> make_buckets(const std::vector<std::pair<size_t, size_t>>& units,
                                 size_t bucket_bytes) {
  std::vector<Bucket> out;
  for (int u = 0; u < int(units.size()); ++u) {
    const auto [b, e] = units[u];
    const bool start_new =
        out.empty() || (out.back().end - out.back().begin) * sizeof(float) >= bucket_bytes;
    if (start_new) {
      out.push_back({b, e, u, u, {}});
    } else {  // units come in backward order: each sits just below the previous one
      out.back().begin = b;
      out.back().last_unit = u;
    }
  }
  return out;
}

void cut_at_tensors(std::vector<Bucket>& buckets, std::vector<size_t> tensor_starts) {
  std::sort(tensor_starts.begin(), tensor_starts.end());
  for (Bucket& k : buckets) {
    k.tensor_ends.clear();
    for (size_t start : tensor_starts)
      if (start > k.begin && start < k.end) k.tensor_ends.push_back(start - k.begin);
    k.tensor_ends.push_back(k.end - k.begin);
  }
}

namespace {

// The engine thread polls its messages while backward computes; where the rank's compute
// threads fill its cores, polling and yielding take them from backward, so it sleeps.
EngineOptions engine_options(int compute_threads) {
  EngineOptions opts;
  if (!rank_has_spare_core(compute_threads)) opts.wait = WaitPolicy::sleeping();
  return opts;
}

}  // namespace

struct GradSync::Pending {
  CommHandle handle;
  bool enqueued = false;
};

GradSync::GradSync(Communicator* comm, const CommConfig& cfg, int compute_threads,
                   DeviceComm* device_comm)
    : comm_(comm), device_comm_(device_comm), cfg_(cfg) {
  if (comm_) {
    rank_ = comm_->rank();
    world_ = comm_->size();
  }
  if (world_ > 1) engine_ = std::make_unique<CommEngine>(*comm_, engine_options(compute_threads));
}

GradSync::~GradSync() = default;

void GradSync::setup(Gpt& model) { setup(model.grads(), model.spec()); }

void GradSync::setup(FlatBuffer& grads, const GptSpec& spec) {
  grads_ = grads.data();
  device_grads_ = nullptr;
  pinned_.reset();  // unpins the old staging copy before it is freed
  if (world_ > 1 && !grads.runtime().host_memory()) {
    staging_ = FlatBuffer(grads.size());  // check_replicas' host copy of the parameters
    if (!device_comm_) {
      Runtime& rt = grads.runtime();
      device_grads_ = &grads;
      rt.pin_host(staging_.data(), staging_.bytes());
      pinned_ = {staging_.data(), [&rt](void* p) { rt.unpin_host(p); }};
      grads_ = staging_.data();
    }
  }
  const std::vector<std::pair<size_t, size_t>> units = spec.bucket_units();
  buckets_ = make_buckets(units, size_t(cfg_.bucket_mb * 1024 * 1024));
  std::vector<size_t> starts;
  for (const TensorInfo& t : spec.registry().tensors()) starts.push_back(t.offset);
  cut_at_tensors(buckets_, starts);
  bucket_of_unit_.assign(units.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (int u = buckets_[b].first_unit; u <= buckets_[b].last_unit; ++u)
      bucket_of_unit_[u] = int(b);
  pending_.clear();
  sign_calls_.clear();
  device_sign_calls_.clear();
  for (size_t b = 0; b < buckets_.size(); ++b) pending_.push_back(std::make_unique<Pending>());
  if (device_comm_) {
    std::vector<size_t> counts;
    for (const Bucket& k : buckets_) counts.push_back(k.end - k.begin);
    device_comm_->reserve(counts);
  }
}

void GradSync::enqueue_bucket(size_t b) {
  const Bucket& k = buckets_[b];
  if (device_comm_) {  // on the comm stream, behind the kernels that wrote the bucket
    device_comm_->reduce_mean(grads_ + k.begin, k.end - k.begin, cfg_.allreduce, b);
    pending_[b]->enqueued = true;
    return;
  }
  std::function<void()> copy_in, copy_out;
  if (device_grads_) {
    // Staged: the bucket leaves the device behind the backward that wrote it (the compute
    // stream goes on), is reduced in host memory, and is back before finish() returns.
    Runtime& rt = device_grads_->runtime();
    float* dev = device_grads_->data() + k.begin;
    float* host = staging_.data() + k.begin;
    const size_t bytes = (k.end - k.begin) * sizeof(float);
    std::shared_ptr<CopyInFlight> out = rt.copy_to_host_async(host, dev, bytes);
    copy_in = [out] { out->wait(); };
    copy_out = [&rt, dev, host, bytes] { rt.copy_to_device_async(dev, host, bytes)->wait(); };
  }
  pending_[b]->handle =
      engine_->enqueue_allreduce(grads_ + k.begin, k.end - k.begin, DType::f32, cfg_.allreduce,
                                 /*average=*/true, b, std::move(copy_in), std::move(copy_out));
  pending_[b]->enqueued = true;
}

std::function<void(int)> GradSync::unit_hook() {
  if ((world_ <= 1 && !device_comm_) || !cfg_.overlap) return nullptr;
  // The embeddings (the last unit) finish as backward ends: their bucket is queued by
  // finish() or wait_sign_sent(), so that it counts as in flight inside the step's wait,
  // where the engine thread's start-up takes the core, and never inside backward's time.
  return [this](int unit) {
    if (size_t(unit) + 1 == bucket_of_unit_.size()) return;
    const size_t b = size_t(bucket_of_unit_[unit]);
    if (buckets_[b].last_unit != unit) return;
    if (!sign_.active)
      enqueue_bucket(b);
    else if (!device_grads_)  // 1-bit Adam's buckets on a GPU start when backward ends
      start_sign_bucket(b);
  };
}

template <class F>
void GradSync::waiting(F&& f) {
  const int64_t t0 = steady_now_ns();
  f();
  waits_.push_back({t0, steady_now_ns()});
}

GradSync::Result GradSync::finish() {
  if (device_comm_) return finish_on_device();
  if (world_ <= 1) return {};
  waiting([&] {
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!pending_[b]->enqueued) enqueue_bucket(b);
    for (auto& p : pending_) {
      p->handle.wait();
      p->enqueued = false;
    }
  });
  Result r = collect_spans();
  // A ring AllReduce sends 2(n-1)/n of the buffer per rank: busbw's factor (nccl-tests).
  r.sent_bytes = size_t(double(r.bytes) * allreduce_busbw_factor(world_));
  last_gradient_ = {r.comm_ms, r.exposed_ms, r.sent_bytes};
  return r;
}

GradSync::Result GradSync::finish_on_device() {
  Result r;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!pending_[b]->enqueued) enqueue_bucket(b);
    pending_[b]->enqueued = false;
    r.bytes += (buckets_[b].end - buckets_[b].begin) * sizeof(float);
  }
  device_comm_->compute_waits_for_comm();
  device_comm_->poll_errors();
  r.sent_bytes = size_t(double(r.bytes) * allreduce_busbw_factor(world_));
  return r;
}

bool GradSync::settle(Result& r) {
  if (!device_comm_) return false;
  DeviceCommTimes t = device_comm_->read_times();
  std::vector<Interval> in_flight;
  for (const CommSpan& s : t.spans) in_flight.push_back({s.queued_ns, s.end_ns});
  r.comm_ms = double(covered_ns(in_flight)) / 1e6;
  r.exposed_ms = double(overlap_ns(in_flight, t.waits)) / 1e6;
  r.spans = std::move(t.spans);
  last_gradient_ = {r.comm_ms, r.exposed_ms, r.sent_bytes};
  return true;
}

GradSync::Result GradSync::collect_spans() {
  Result r;
  r.spans = std::move(kept_spans_);
  kept_spans_.clear();
  for (CommSpan& s : engine_->drain_spans()) r.spans.push_back(std::move(s));
  std::stable_sort(r.spans.begin(), r.spans.end(),
                   [](const CommSpan& a, const CommSpan& b) { return a.queued_ns < b.queued_ns; });
  std::vector<Interval> in_flight;
  for (const CommSpan& s : r.spans) {
    in_flight.push_back({s.queued_ns, s.end_ns});
    r.bytes += s.bytes;
  }
  r.comm_ms = double(covered_ns(in_flight)) / 1e6;
  r.exposed_ms = double(overlap_ns(in_flight, waits_)) / 1e6;
  waits_.clear();
  return r;
}

void GradSync::begin_sign_average(float* buf, float* worker_error, float* server_error, size_t n,
                                  const SignCode& code, Part prepare, Input input) {
  if (device_comm_ && input)
    throw std::logic_error("sign_average on a DeviceComm reads its input from BUF, not INPUT");
  sign_ = {buf, worker_error, server_error, n, std::move(prepare), std::move(input), {}, true};
  if (world_ == 1) return;
  if (buckets_.empty() || n != buckets_.front().end)
    throw std::logic_error("sign_average: " + std::to_string(n) +
                           " elements, not the parameters GradSync was set up for");
  set_sign_code(code);
}

void GradSync::set_sign_code(const SignCode& code) {
  const size_t made = device_comm_ ? device_sign_calls_.size() : sign_calls_.size();
  if (made == buckets_.size() && sign_code_.block == code.block && sign_code_.scale == code.scale)
    return;
  sign_calls_.clear();
  device_sign_calls_.clear();
  for (const Bucket& k : buckets_) {
    const size_t len = k.end - k.begin;
    const std::vector<size_t> ends = split_segments(k.tensor_ends, len, code.block);
    if (device_comm_)
      device_sign_calls_.push_back(std::make_unique<DeviceSignAllreduce>(
          len, ends, world_, rank_, code.scale, device_comm_->memory(),
          device_comm_->sign_kernels()));
    else
      sign_calls_.emplace_back(len, ends, world_, rank_, code.scale);
  }
  sign_code_ = code;
}

SignCost GradSync::measure_sign_code(const float* buf, size_t n, const SignCode& code) {
  if (world_ == 1 || device_comm_ || sign_.active || buckets_.empty() || n != buckets_.front().end)
    return {};
  set_sign_code(code);
  FlatBuffer error(n), server_error(n), out(n);
  error.zero();
  server_error.zero();
  out.zero();  // its pages touched outside the clock
  SignCost cost;
  const int64_t t0 = steady_now_ns();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& k = buckets_[b];
    cost.sent_bytes += sign_calls_[b].encode(buf + k.begin, error.data() + k.begin).bytes_sent;
    sign_calls_[b].serve_alone(server_error.data() + k.begin);
    sign_calls_[b].decode(out.data() + k.begin);
  }
  cost.code_ms = double(steady_now_ns() - t0) / 1e6;
  return cost;
}

// Bucket b of the sign_average in progress: prepared and encoded on this thread, its exchange
// queued on the engine (which meanwhile exchanges the buckets queued before it).
void GradSync::start_sign_bucket(size_t b) {
  const Bucket& k = buckets_[b];
  if (sign_.prepare) sign_.prepare(k.begin, k.end);
  float* worker = sign_.worker_error + k.begin;
  if (device_comm_) {  // on the comm stream, behind the compute stream's work so far
    sign_.total.bytes_sent += device_sign_calls_[b]
                                  ->queue_exchange(*device_comm_, sign_.buf + k.begin, worker,
                                                   sign_.server_error + k.begin)
                                  .bytes_sent;
    pending_[b]->enqueued = true;
    return;
  }
  const SignAllreduceStats s =
      sign_.input
          ? sign_calls_[b].encode(
                [&](size_t lo, size_t hi, float* z) { sign_.input(k.begin + lo, k.begin + hi, z); },
                worker)
          : sign_calls_[b].encode(sign_.buf + k.begin, worker);
  sign_.total.bytes_sent += s.bytes_sent;
  sign_.total.worker_sq_err += s.worker_sq_err;
  sign_.total.worker_sq_norm += s.worker_sq_norm;
  SignAllreduce* exchange = &sign_calls_[b];
  float* server = sign_.server_error + k.begin;
  pending_[b]->handle = engine_->enqueue(
      {"sign_allreduce", b, k.end - k.begin, DType::f32},
      [exchange, server](Communicator& c) { exchange->exchange(c, server, kSignAllreduceTag); });
  pending_[b]->enqueued = true;
}

void GradSync::wait_sign_sent() {
  if (!sign_.active || world_ == 1) return;
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!pending_[b]->enqueued) start_sign_bucket(b);
  if (device_comm_) return;  // the comm stream runs them; the bookkeeping goes over COMM
  waiting([&] {
    for (auto& p : pending_) p->handle.wait();
  });
}

SignExchange GradSync::finish_sign_average(const Part& finish) {
  if (!sign_.active) throw std::logic_error("finish_sign_average without begin_sign_average");
  sign_.active = false;
  if (world_ == 1) {  // the mean is the input itself
    if (sign_.prepare) sign_.prepare(0, sign_.n);
    if (sign_.input && finish) {
      std::fill(sign_.buf, sign_.buf + sign_.n, 0.0f);
      sign_.input(0, sign_.n, sign_.buf);
    }
    if (finish) finish(0, sign_.n);
    return {};
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!pending_[b]->enqueued) start_sign_bucket(b);
  if (device_comm_) return finish_sign_on_device(finish);
  // Each bucket is decoded and finished here while the engine exchanges the later ones.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& k = buckets_[b];
    waiting([&] { pending_[b]->handle.wait(); });
    pending_[b]->enqueued = false;
    if (!finish) continue;  // abandoned: nothing decoded
    sign_calls_[b].decode(sign_.buf + k.begin);
    finish(k.begin, k.end);
  }
  exchange_sent_bytes_ += sign_.total.bytes_sent;
  return sign_.total;
}

// Device path: every bucket decoded on the comm stream, the compute stream's wait for it,
// then each bucket's FINISH (queued on the compute stream, behind the wait).
SignExchange GradSync::finish_sign_on_device(const Part& finish) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b]->enqueued = false;
    if (finish) device_sign_calls_[b]->queue_decode(*device_comm_, sign_.buf + buckets_[b].begin);
  }
  device_comm_->compute_waits_for_comm();
  device_comm_->poll_errors();
  if (finish)
    for (const Bucket& k : buckets_) finish(k.begin, k.end);
  exchange_sent_bytes_ += sign_.total.bytes_sent;
  return sign_.total;
}

GradSync::Result GradSync::take_exchange() {
  Result r;
  if (world_ > 1) r = collect_spans();
  r.sent_bytes = exchange_sent_bytes_;
  exchange_sent_bytes_ = 0;
  return r;
}

void GradSync::wait_bookkeeping(const CommHandle& handle) {
  handle.wait();
  // Bookkeeping traffic is not gradient communication; buckets that completed meanwhile
  // (1-bit Adam's, sent under backward) are kept for the step's accounting.
  for (CommSpan& s : engine_->drain_spans())
    if (s.tag < kStepViewTag) kept_spans_.push_back(std::move(s));
}

bool GradSync::any_rank(bool flag) { return first_rank(flag) >= 0; }

int GradSync::first_rank(bool flag) {
  if (world_ == 1) return flag ? 0 : -1;
  float lowest = flag ? float(rank_) : float(world_);
  wait_bookkeeping(engine_->enqueue(
      {"allreduce", kAnyRankTag, 1, DType::f32},
      [&](Communicator& c) { c.allreduce(&lowest, 1, DType::f32, ReduceOp::min); }));
  return lowest < float(world_) ? int(lowest) : -1;
}

void GradSync::average(float* buf, size_t n) {
  if (world_ == 1) return;
  wait_bookkeeping(engine_->enqueue_allreduce(buf, n, DType::f32, cfg_.allreduce,
                                              /*average=*/true, kAverageTag));
}

namespace {

// One rank's contribution to a step's agreement; copied as bytes between ranks.
struct RankStep {
  PhaseTimes times;
  double loss = 0;
  double sq_err = 0, sq_norm = 0;  // of the step's sign_average, if any
};

Spread spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), percentile(v, 0.5), v.back()};
}

}  // namespace

GradSync::StepView GradSync::agree(float loss, const PhaseTimes& local,
                                   const SignExchange& exchange) {
  std::vector<RankStep> all(world_);
  all[rank_] = {local, double(loss), exchange.worker_sq_err, exchange.worker_sq_norm};
  if (world_ > 1) {
    wait_bookkeeping(engine_->enqueue(
        {"allgather_bytes", kStepViewTag, world_ * sizeof(RankStep), DType::f32},
        [&](Communicator& c) { c.allgather_bytes(all.data(), sizeof(RankStep)); }));
  }
  StepView v;
  RanksBlock& k = v.ranks;
  k.world = world_;
  double loss_sum = 0, sq_err = 0, sq_norm = 0;
  k.slowest = 0;
  for (int r = 0; r < world_; ++r) {
    loss_sum += all[r].loss;
    sq_err += all[r].sq_err;
    sq_norm += all[r].sq_norm;
    if (all[r].times.step > all[k.slowest].times.step) k.slowest = r;
  }
  v.mean_loss = float(loss_sum / world_);
  v.compression_error = sq_norm > 0 ? std::sqrt(sq_err / sq_norm) : NAN;
  v.slowest = all[k.slowest].times;
  // Per phase, across ranks: where a slow rank loses its time.
  for (size_t f = 0; f < kPhaseFields.size(); ++f) {
    std::vector<double> vals;
    for (const RankStep& s : all) vals.push_back(s.times.*kPhaseFields[f].ms);
    k.phase_ms[f] = spread_of(vals);
  }
  k.step_ms = k.phase_ms[0];
  // Step times agree across ranks (everyone waits for the slowest inside the reduction);
  // the busy time, step - comm_exposed, is what tells a straggler.
  std::vector<double> busy;
  for (const RankStep& s : all) busy.push_back(s.times.step - s.times.comm_exposed);
  find_straggler(busy, v);
  return v;
}

void GradSync::find_straggler(const std::vector<double>& busy, StepView& v) {
  std::vector<double> sorted = busy;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(world_ - 1) / 2];  // lower median: with 2 ranks, the faster
  straggler_streak_.resize(world_, 0);
  int straggler = -1;
  for (int r = 0; r < world_; ++r) {
    straggler_streak_[r] = busy[r] >= kStragglerRatio * median ? straggler_streak_[r] + 1 : 0;
    if (straggler_streak_[r] >= kStragglerSteps && (straggler < 0 || busy[r] > busy[straggler]))
      straggler = r;
  }
  v.ranks.busy_ms_median = median;
  v.ranks.busy_ms_max = sorted.back();
  v.ranks.straggler = straggler;
  v.straggler_ratio = straggler >= 0 && median > 0 ? busy[straggler] / median : 0;
}

std::vector<uint64_t> GradSync::gather(uint64_t value) {
  std::vector<uint64_t> all(world_);
  all[rank_] = value;
  gather_bytes(all.data(), sizeof(uint64_t));
  return all;
}

void GradSync::gather_bytes(void* buf, size_t bytes_per_rank) {
  if (world_ == 1) return;
  wait_bookkeeping(
      engine_->enqueue({"allgather_bytes", kGatherTag, world_ * bytes_per_rank, DType::f32},
                       [&](Communicator& c) { c.allgather_bytes(buf, bytes_per_rank); }));
}

void GradSync::check_replicas(const FlatBuffer& params, int step) {
  if (world_ <= 1) return;
  const FlatBuffer* host = &params;
  if (!params.runtime().host_memory()) {
    copy_buffer(staging_, params);  // setup() sized it; between steps it holds nothing needed
    host = &staging_;
  }
  const std::vector<uint64_t> all = gather(fnv1a64(host->data(), host->bytes()));
  std::string bad;
  for (int r = 1; r < world_; ++r)
    if (all[r] != all[0]) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  if (!bad.empty())
    throw CommError("replicas diverged at step " + std::to_string(step) +
                    ": parameters of rank(s) " + bad + " differ from rank 0's");
}

}  // namespace ringstep
