#include "optim/onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "core/optim_math.h"
#include "core/runtime.h"

namespace ringstep {
namespace {

constexpr size_t kChoiceCosts = 6;  // CompressChoice's numbers, from_step last

}  // namespace

OneBitAdam::OneBitAdam(const Registry& reg, const AdamWParams& hp, const OneBitParams& ob,
                       Device device)
    : OneBitAdam(AdamW(reg, hp, device), reg, hp, ob) {}

OneBitAdam::OneBitAdam(const Registry& reg, const AdamWParams& hp, const OneBitParams& ob,
                       Runtime& rt)
    : OneBitAdam(AdamW(reg, hp, rt), reg, hp, ob) {}

OneBitAdam::OneBitAdam(AdamW adam, const Registry& reg, const AdamWParams& hp,
                       const OneBitParams& ob)
    : adam_(std::move(adam)),
      reg_(reg),
      hp_(hp),
      ob_(ob),
      rt_(adam_.m().runtime()),
      worker_error_(reg.total_numel(), rt_),
      server_error_(reg.total_numel(), rt_),
      choice_(1),
      choice_costs_(kChoiceCosts) {
  reset_errors();
  choice_.zero();
  choice_costs_.zero();
  if (ob_.under_backward && ob_.may_skip) {
    kept_worker_ = FlatBuffer(reg.total_numel(), rt_);
    kept_server_ = FlatBuffer(reg.total_numel(), rt_);
  }
}

void OneBitAdam::reset_errors() {
  worker_error_.zero();
  server_error_.zero();
}

std::optional<bool> OneBitAdam::compressing() const {
  if (ob_.compress != OneBitCompress::auto_ || choice_.data()[0] == 0.0f) return std::nullopt;
  return choice_.data()[0] > 0.0f;
}

std::optional<OneBitStage> OneBitAdam::stage(int world) const {
  const bool after_warmup = world > 1 && adam_.step_count() >= ob_.freeze_step;
  const bool compress = ob_.compress == OneBitCompress::always ||
                        (ob_.compress == OneBitCompress::auto_ && compressing().value_or(true));
  return after_warmup && compress ? OneBitStage::compressed : OneBitStage::warmup;
}

std::string OneBitAdam::take_note() { return std::exchange(note_, ""); }

void OneBitAdam::observe_warmup(Reducer& reducer) {
  if (ob_.compress != OneBitCompress::auto_ || reducer.world() == 1 || compressing().has_value())
    return;
  warmup_costs_.push_back(reducer.last_gradient_exchange());
  if (adam_.step_count() < ob_.freeze_step) return;
  // The median of the warm-up's steps after the first two (cold), where there are more.
  std::vector<ExchangeCost> c = warmup_costs_;
  if (c.size() > 2) c.erase(c.begin(), c.begin() + 2);
  auto median = [&c](auto field) {
    std::vector<double> v;
    for (const ExchangeCost& e : c) v.push_back(double(e.*field));
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const SignCost code = reducer.measure_sign_code(adam_.m().data(), adam_.m().size(),
                                                  SignCode{ob_.scale, size_t(ob_.scale_block)});
  float agreed[5] = {
      float(median(&ExchangeCost::exposed_ms)), float(median(&ExchangeCost::comm_ms)),
      float(median(&ExchangeCost::sent_bytes)), float(code.sent_bytes), float(code.code_ms)};
  reducer.average(agreed, 5);
  const CompressChoice choice{agreed[0], agreed[1], agreed[2],
                              agreed[3], agreed[4], adam_.step_count() + 1};
  choice_.data()[0] = choice.compress() ? 1.0f : -1.0f;
  float* costs = choice_costs_.data();
  for (int i = 0; i < 5; ++i) costs[i] = agreed[i];
  costs[5] = float(choice.from_step);
  note_ = choice.describe();
}

std::optional<CompressChoice> OneBitAdam::compress_choice() const {
  const float* c = choice_costs_.data();
  if (!compressing() || c[5] == 0.0f) return std::nullopt;
  return CompressChoice{c[0], c[1], c[2], c[3], c[4], int64_t(c[5])};
}

std::vector<StateTensor> OneBitAdam::state_tensors() {
  std::vector<StateTensor> out = adam_.state_tensors();
  out.push_back({"onebit_choice", &choice_, false, true});
  out.push_back({"onebit_choice_costs", &choice_costs_, false, true});
  out.push_back({"onebit", &worker_error_, true});
  out.push_back({"onebit", &server_error_, true});
  return out;
}

size_t OneBitAdam::state_bytes() const {
  return adam_.state_bytes() + choice_.bytes() + choice_costs_.bytes() + worker_error_.bytes() +
         server_error_.bytes() + kept_worker_.bytes() + kept_server_.bytes() + kept_m_.bytes();
}

void OneBitAdam::adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved, int, int) {
  const size_t n = worker_error_.size();
  FlatBuffer host;  // where the errors live on a device: formed here, then copied (a resume)
  float* ew = rt_.host_memory() ? worker_error_.data() : (host = FlatBuffer(n)).data();
  const float inv = 1.0f / float(saved.size());
  for (size_t i = 0; i < n; ++i) {
    float sum_w = 0, sum_s = 0;
    for (const std::vector<FlatBuffer>& r : saved) {
      sum_w += r.at(0).data()[i];
      sum_s += r.at(1).data()[i];
    }
    ew[i] = sum_w * inv + sum_s;
  }
  if (!rt_.host_memory()) copy_buffer(worker_error_, host);
  server_error_.zero();
}

void OneBitAdam::add_local_momentum(const float* grads, float grad_scale, size_t begin, size_t end,
                                    float* __restrict z) const {
  const float b1 = float(hp_.beta1);
  const float* __restrict m = adam_.m().data() + begin;
  const float* __restrict g = grads + begin;
  const size_t n = end - begin;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) z[i] += onebit_local_momentum(m[i], g[i], b1, grad_scale);
}

// The update of elements [begin, end) with the averaged momentum, and the zero-variance mask
// (see the header), on the runtime.
void OneBitAdam::apply(float* params, double lr, size_t begin, size_t end) {
  const OneBitStep s =
      onebit_scalars(hp_.beta1, hp_.beta2, hp_.eps, lr, adam_.step_count(), ob_.freeze_step);
  rt_.onebit_update(reg_.tensors(), begin, end, s, float(lr * hp_.weight_decay), params,
                    adam_.m().data(), adam_.v().data(), worker_error_.data(), server_error_.data());
}

SignExchange OneBitAdam::compressed_step(float* params, const float* grads, double lr,
                                         double grad_scale, Reducer& reducer) {
  begin_exchange(grads, float(grad_scale), reducer);
  adam_.set_step_count(adam_.step_count() + 1);
  return reducer.finish_sign_average([&](size_t b, size_t e) { apply(params, lr, b, e); });
}

// Each part's local momentum is formed as the reducer codes it (Reducer::Input: added into
// the worker error, never stored; m keeps its old values until the mean is decoded into
// it), or, where the reducer reads BUF (a device path), by the runtime's pass into m in the
// part's PREPARE. Before that, where a skip must restore them, PREPARE keeps the part's
// error buffers (and m, where it is about to be overwritten).
void OneBitAdam::begin_exchange(const float* grads, float grad_scale, Reducer& reducer) {
  const bool keep = in_flight_ && ob_.may_skip;
  const bool into_m = !reducer.takes_input();
  if (keep && into_m && kept_m_.size() == 0)
    kept_m_ = FlatBuffer(adam_.m().size(), rt_);  // once, at the first such step
  Reducer::Part prepare;
  if (keep || into_m)
    prepare = [this, keep, into_m, grads, grad_scale](size_t b, size_t e) {
      const size_t bytes = (e - b) * sizeof(float);
      if (keep) {
        rt_.copy(kept_worker_.data() + b, worker_error_.data() + b, bytes);
        rt_.copy(kept_server_.data() + b, server_error_.data() + b, bytes);
        if (into_m) rt_.copy(kept_m_.data() + b, adam_.m().data() + b, bytes);
      }
      if (into_m) rt_.onebit_momentum(adam_.m().data(), grads, b, e, float(hp_.beta1), grad_scale);
    };
  Reducer::Input input;
  if (!into_m)
    input = [this, grads, grad_scale](size_t b, size_t e, float* z) {
      add_local_momentum(grads, grad_scale, b, e, z);
    };
  reducer.begin_sign_average(adam_.m().data(), worker_error_.data(), server_error_.data(),
                             adam_.m().size(), SignCode{ob_.scale, size_t(ob_.scale_block)},
                             std::move(prepare), std::move(input));
}

bool OneBitAdam::begin_under_backward(const float* grads, double grad_scale, Reducer& reducer) {
  if (!ob_.under_backward || *stage(reducer.world()) != OneBitStage::compressed) return false;
  in_flight_ = true;
  begin_exchange(grads, float(grad_scale), reducer);
  return true;
}

SignExchange OneBitAdam::step(FlatBuffer& params, const FlatBuffer& grads, double lr,
                              double grad_scale, Reducer& reducer) {
  if (!in_flight_) {
    if (*stage(reducer.world()) == OneBitStage::warmup) {
      adam_.step(params, grads, lr, grad_scale);
      observe_warmup(reducer);
      return {};
    }
    return compressed_step(params.data(), grads.data(), lr, grad_scale, reducer);
  }
  in_flight_ = false;
  adam_.set_step_count(adam_.step_count() + 1);
  float* p = params.data();
  return reducer.finish_sign_average([&](size_t b, size_t e) { apply(p, lr, b, e); });
}

SignExchange OneBitAdam::skip(Reducer& reducer) {
  if (!in_flight_) return {};
  in_flight_ = false;
  const SignExchange done = reducer.finish_sign_average({});
  if (ob_.may_skip) {
    copy_buffer(worker_error_, kept_worker_);
    copy_buffer(server_error_, kept_server_);
    if (kept_m_.size() > 0) copy_buffer(adam_.m(), kept_m_);
  }
  return done;
}

std::string onebit_warning(const Config& cfg, int world) {
  if (cfg.optimizer.name != OptimizerKind::onebit_adam) return "";
  if (world == 1)
    return "optimizer.name is onebit_adam on one rank: nothing to compress, the run is plain "
           "Adam (AdamW)";
  const int freeze = cfg.optimizer.onebit.freeze_step, steps = cfg.train.steps;
  if (freeze >= steps)
    return "optimizer.onebit.freeze_step (" + std::to_string(freeze) + ") >= train.steps (" +
           std::to_string(steps) +
           "): the variance never freezes and the run is plain Adam (AdamW); DeepSpeed advises "
           "15-25% of the steps";
  const double beta2 = cfg.optimizer.betas[1];
  if (beta2 >= kOneBitMinBeta2) return "";
  std::ostringstream w;
  w << "optimizer.betas[1] is " << beta2 << ": the variance averages about "
    << int(std::lround(1.0 / (1.0 - beta2))) << " steps and is frozen at step " << freeze
    << "; 1-bit Adam's authors use 0.999, which kept real-text runs within 0.04 nats of "
       "AdamW where 0.95 left up to 0.08 (docs/optim.md)";
  return w.str();
}

}  // namespace ringstep
