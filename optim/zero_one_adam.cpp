#include "optim/zero_one_adam.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ringstep {

bool ZeroOneSchedule::updates_variance(int64_t s) const {
  if (s < 1 || s > p.var_freeze_step) return false;
  const int64_t kappa = p.var_update_scaler;
  for (int64_t interval = 1, start = 0;; start += kappa * interval, interval *= 2)
    if (s <= start + kappa * interval) return (s - start) % interval == 0;
}

bool ZeroOneSchedule::syncs(int64_t s) const {
  if (s <= p.var_freeze_step || s == p.last_step) return true;
  const int64_t f = s - p.var_freeze_step, scaler = p.local_step_scaler;
  const int64_t g = (f - 1) / scaler;
  const int64_t interval =
      g >= 31 ? p.local_step_clipper : std::min<int64_t>(int64_t{1} << g, p.local_step_clipper);
  return (f - g * scaler) % interval == 0 || f % scaler == 0;
}

ZeroOneAdam::ZeroOneAdam(const Registry& reg, const AdamWParams& hp, const ZeroOneParams& zo)
    : reg_(reg),
      hp_(hp),
      sched_{zo},
      m_(reg.total_numel()),
      v_(reg.total_numel()),
      u_(reg.total_numel()),
      a_(reg.total_numel()),
      ew_(reg.total_numel()),
      es_(reg.total_numel()),
      scalars_(3) {
  for (FlatBuffer* b : {&m_, &v_, &u_, &a_, &ew_, &es_}) b->zero();
  scalars_.data()[0] = 1.0f;  // D
  scalars_.data()[1] = 0.0f;  // L
  scalars_.data()[2] = 0.0f;  // S
}

OneBitStage ZeroOneSchedule::stage(int64_t s, int world) const {
  if (world == 1 || updates_variance(s)) return OneBitStage::warmup;
  if (s <= p.var_freeze_step) return OneBitStage::compressed;
  return syncs(s) ? OneBitStage::sync : OneBitStage::local;
}

ZeroOneParams zero_one_params(const Config& cfg) {
  const ZeroOneConfig& zo = cfg.optimizer.zero_one;
  const OneBitConfig& ob = cfg.optimizer.onebit;  // the sign code's knobs
  return {zo.var_freeze_step,    zo.var_update_scaler, zo.local_step_scaler,
          zo.local_step_clipper, cfg.train.steps,      SignCode{ob.scale, size_t(ob.scale_block)}};
}

std::optional<OneBitStage> ZeroOneAdam::stage(int world) const {
  return sched_.stage(t_ + 1, world);
}

bool ZeroOneAdam::replicas_agree() const { return t_ == 0 || sched_.syncs(t_); }

float ZeroOneAdam::inv_sqrt_c2() const {
  const double covered = std::max(1.0, double(scalars_.data()[2]));
  return float(1.0 / std::sqrt(1.0 - std::pow(hp_.beta2, covered)));
}

std::vector<StateTensor> ZeroOneAdam::state_tensors() {
  return {{"adam_v", &v_, false},
          {"zero_one_anchor", &a_, false},
          {"zero_one_scalars", &scalars_, false},
          {"zero_one", &m_, true},
          {"zero_one", &u_, true},
          {"zero_one", &ew_, true},
          {"zero_one", &es_, true}};
}

size_t ZeroOneAdam::state_bytes() const {
  return m_.bytes() + v_.bytes() + u_.bytes() + a_.bytes() + ew_.bytes() + es_.bytes() +
         scalars_.bytes();
}

void ZeroOneAdam::adopt_world_change(const std::vector<std::vector<FlatBuffer>>& saved, int, int) {
  const float inv = 1.0f / float(saved.size());
  float* out[3] = {m_.data(), u_.data(), ew_.data()};
  for (size_t i = 0; i < m_.size(); ++i) {
    float sum[3] = {0, 0, 0}, sum_s = 0;
    for (const std::vector<FlatBuffer>& r : saved) {
      for (int k = 0; k < 3; ++k) sum[k] += r.at(size_t(k)).data()[i];
      sum_s += r.at(3).data()[i];
    }
    out[0][i] = sum[0] * inv;
    out[1][i] = sum[1] * inv;
    out[2][i] = sum[2] * inv + sum_s;
  }
  es_.zero();
}

void ZeroOneAdam::set_local_params(float* params, size_t begin, size_t end, float dt) const {
  const float scale = inv_sqrt_c2(), eps = float(hp_.eps);
  const float* a = a_.data();
  const float* u = u_.data();
  const float* v = v_.data();
  for (size_t i = begin; i < end; ++i)
    params[i] = dt * a[i] - u[i] / (std::sqrt(v[i]) * scale + eps);
}

void ZeroOneAdam::restore_params(FlatBuffer& params) {
  if (params.size() != a_.size())
    throw std::logic_error("ZeroOneAdam::restore_params: parameters of another registry");
  for (const TensorInfo& t : reg_.tensors())
    set_local_params(params.data(), t.offset, t.offset + t.numel,
                     t.decay ? scalars_.data()[0] : 1.0f);
}

void ZeroOneAdam::variance_step(float* params, const float* grads, double lr, float grad_scale) {
  // Local steps still pending (a run resumed on one rank after them): PARAMS already hold
  // them (restore_params), and the anchor becomes PARAMS below.
  if (scalars_.data()[1] != 0.0f) {
    u_.zero();
    scalars_.data()[0] = 1.0f;
    scalars_.data()[1] = 0.0f;
  }
  ++t_;
  // The gradient stands for every step since the last update: v decays by b2 per step.
  const double gap = double(t_) - double(scalars_.data()[2]);
  scalars_.data()[2] = float(t_);
  const float b1 = float(hp_.beta1), eps = float(hp_.eps);
  const float b2 = float(std::pow(hp_.beta2, gap)),
              new_weight = float(1.0 - std::pow(hp_.beta2, gap));
  const float step_size = float(lr / (1.0 - std::pow(hp_.beta1, double(t_))));
  const float scale = inv_sqrt_c2();
  float* m = m_.data();
  float* v = v_.data();
  float* a = a_.data();
  for (const TensorInfo& t : reg_.tensors()) {
    const float decay = t.decay ? float(lr * hp_.weight_decay) : 0.0f;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const float g = grads[i] * grad_scale;
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + new_weight * (g * g);
      params[i] -= step_size * m[i] / (std::sqrt(v[i]) * scale + eps) + decay * params[i];
      a[i] = params[i];
    }
  }
}

SignExchange ZeroOneAdam::local_step(float* params, const float* grads, double lr, float grad_scale,
                                     bool sync, Reducer& reducer) {
  ++t_;
  const float b1 = float(hp_.beta1);
  const float lr_c1 = float(lr / (1.0 - std::pow(hp_.beta1, double(t_))));
  const float k_decay = float(1.0 - lr * hp_.weight_decay);
  float& d = scalars_.data()[0];
  float& l = scalars_.data()[1];
  d *= k_decay;
  l += float(lr);
  float* m = m_.data();
  float* u = u_.data();
  const float* v = v_.data();
  for (const TensorInfo& t : reg_.tensors()) {
    const float k = t.decay ? k_decay : 1.0f;
    const size_t lo = t.offset, hi = t.offset + t.numel;
    for (size_t i = lo; i < hi; ++i) {
      const bool live = v[i] != 0.0f;
      const float mi = b1 * m[i] + (1.0f - b1) * (grads[i] * grad_scale);
      m[i] = live ? mi : 0.0f;
      u[i] = live ? k * u[i] + lr_c1 * mi : 0.0f;
    }
    if (!sync) set_local_params(params, lo, hi, t.decay ? d : 1.0f);
  }
  if (!sync) return {};
  const SignExchange done =
      reducer.sign_average(u, ew_.data(), es_.data(), u_.size(), sched_.p.code, {},
                           [&](size_t b, size_t e) { apply_sync(params, b, e); });
  d = 1.0f;
  l = 0.0f;
  return done;
}

void ZeroOneAdam::apply_sync(float* params, size_t begin, size_t end) {
  const float scale = inv_sqrt_c2(), eps = float(hp_.eps);
  const float to_m = float((1.0 - std::pow(hp_.beta1, double(t_))) / double(scalars_.data()[1]));
  const float d = scalars_.data()[0];
  float* m = m_.data();
  float* u = u_.data();
  float* a = a_.data();
  float* ew = ew_.data();
  float* es = es_.data();
  const float* v = v_.data();
  for (const TensorInfo& t : reg_.tensors()) {
    const float dt = t.decay ? d : 1.0f;
    const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    for (size_t i = lo; i < hi; ++i) {
      const bool live = v[i] != 0.0f;
      const float mean = live ? u[i] : 0.0f;
      m[i] = mean * to_m;
      a[i] = dt * a[i] - mean / (std::sqrt(v[i]) * scale + eps);
      params[i] = a[i];
      if (!live) ew[i] = es[i] = 0.0f;
    }
  }
  std::fill(u + begin, u + end, 0.0f);  // registry padding too: it never enters a sync
}

SignExchange ZeroOneAdam::step(FlatBuffer& params, const FlatBuffer& grads, double lr,
                               double grad_scale, Reducer& reducer) {
  const OneBitStage st = *stage(reducer.world());
  if (st == OneBitStage::warmup) {
    variance_step(params.data(), grads.data(), lr, float(grad_scale));
    return {};
  }
  return local_step(params.data(), grads.data(), lr, float(grad_scale), st != OneBitStage::local,
                    reducer);
}

std::string zero_one_warning(const Config& cfg, int world) {
  if (cfg.optimizer.name != OptimizerKind::zero_one_adam) return "";
  if (world == 1)
    return "optimizer.name is zero_one_adam on one rank: nothing to compress, the run is plain "
           "Adam";
  const int freeze = cfg.optimizer.zero_one.var_freeze_step, steps = cfg.train.steps;
  if (freeze >= steps)
    return "optimizer.zero_one.var_freeze_step (" + std::to_string(freeze) + ") >= train.steps (" +
           std::to_string(steps) + "): the variance never freezes and no step is local";
  return "";
}

}  // namespace ringstep
