#include "optim/onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

namespace ringstep {
namespace {

constexpr size_t kChoiceCosts = 6;  // CompressChoice's numbers, from_step last

}  // namespace

OneBitAdam::OneBitAdam(const Registry& reg, const AdamWParams& hp, const OneBitParams& ob,
                       Device device)
    : adam_(reg, hp, device),
      reg_(reg),
      hp_(hp),
      ob_(ob),
      worker_error_(reg.total_numel()),
      server_error_(reg.total_numel()),
      choice_(1),
      choice_costs_(kChoiceCosts) {
  reset_errors();
  choice_.zero();
  choice_costs_.zero();
  if (ob_.under_backward && ob_.may_skip) {
    kept_worker_ = FlatBuffer(reg.total_numel());
    kept_server_ = FlatBuffer(reg.total_numel());
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
         server_error_.bytes() + kept_worker_.bytes() + kept_server_.bytes();
}

void OneBitAdam::adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved, int, int) {
  const size_t n = worker_error_.size();
  float* ew = worker_error_.data();
  const float inv = 1.0f / float(saved.size());
  for (size_t i = 0; i < n; ++i) {
    float sum_w = 0, sum_s = 0;
    for (const std::vector<FlatBuffer>& r : saved) {
      sum_w += r.at(0).data()[i];
      sum_s += r.at(1).data()[i];
    }
    ew[i] = sum_w * inv + sum_s;
  }
  server_error_.zero();
}

void OneBitAdam::add_local_momentum(const float* grads, float grad_scale, size_t begin, size_t end,
                                    float* __restrict z) const {
  const float b1 = float(hp_.beta1);
  const float* __restrict m = adam_.m().data() + begin;
  const float* __restrict g = grads + begin;
  const size_t n = end - begin;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) z[i] += b1 * m[i] + (1.0f - b1) * (g[i] * grad_scale);
}

// The update of elements [begin, end) with the averaged momentum, and the zero-variance mask
// (see the header).
void OneBitAdam::apply(float* params, double lr, size_t begin, size_t end) {
  const double c1 = 1.0 - std::pow(hp_.beta1, double(adam_.step_count()));
  const double c2 = 1.0 - std::pow(hp_.beta2, double(ob_.freeze_step));
  const float step_size = float(lr / c1);
  const float inv_sqrt_c2 = float(1.0 / std::sqrt(c2));
  const float eps = float(hp_.eps);
  float* m = adam_.m().data();
  const float* v = adam_.v().data();
  float* ew = worker_error_.data();
  float* es = server_error_.data();
  for (const TensorInfo& t : reg_.tensors()) {
    const float decay = t.decay ? float(lr * hp_.weight_decay) : 0.0f;
    const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    size_t dead = 0;  // coordinates whose frozen variance is 0: decay only (-0 adds nothing)
#pragma omp simd reduction(+ : dead)
    for (size_t i = lo; i < hi; ++i) {
      const bool live = v[i] != 0.0f;
      const float momentum_step = step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
      params[i] -= (live ? momentum_step : -0.0f) + decay * params[i];
      dead += !live;
    }
    if (dead == 0) continue;
    for (size_t i = lo; i < hi; ++i)
      if (v[i] == 0.0f) m[i] = ew[i] = es[i] = 0.0f;
  }
}

SignExchange OneBitAdam::compressed_step(float* params, const float* grads, double lr,
                                         double grad_scale, Reducer& reducer) {
  begin_exchange(grads, float(grad_scale), reducer);
  adam_.set_step_count(adam_.step_count() + 1);
  return reducer.finish_sign_average([&](size_t b, size_t e) { apply(params, lr, b, e); });
}

// Each part's local momentum is formed as the reducer codes it (Reducer::Input: added into
// the worker error, never stored; m keeps its old values until the mean is decoded into
// it), after the part's error buffers are kept, where a skip must restore them.
void OneBitAdam::begin_exchange(const float* grads, float grad_scale, Reducer& reducer) {
  const bool keep = in_flight_ && ob_.may_skip;
  Reducer::Part prepare;
  if (keep)
    prepare = [this](size_t b, size_t e) {
      const size_t bytes = (e - b) * sizeof(float);
      std::memcpy(kept_worker_.data() + b, worker_error_.data() + b, bytes);
      std::memcpy(kept_server_.data() + b, server_error_.data() + b, bytes);
    };
  reducer.begin_sign_average(adam_.m().data(), worker_error_.data(), server_error_.data(),
                             adam_.m().size(), SignCode{ob_.scale, size_t(ob_.scale_block)},
                             std::move(prepare),
                             [this, grads, grad_scale](size_t b, size_t e, float* z) {
                               add_local_momentum(grads, grad_scale, b, e, z);
                             });
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
