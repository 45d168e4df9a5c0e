// ZeroOneAdam on one process: its two schedules (DeepSpeed's variance intervals among
// them), the stage of each step, the closed-form local step against the float64 recurrence
// of decoupled-decay Adam, the sync's momentum, and parameters rebuilt from the state bit
// for bit.
#include "optim/zero_one_adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ringstep {
namespace {

TEST(ZeroOneSchedule, VarianceUpdatesAtDoublingIntervalsUntilTheFreeze) {
  ZeroOneSchedule s{{.var_freeze_step = 20, .var_update_scaler = 2}};
  std::vector<int> tv;
  for (int t = 1; t <= 40; ++t)
    if (s.updates_variance(t)) tv.push_back(t);
  EXPECT_EQ(tv, (std::vector<int>{1, 2, 4, 6, 10, 14}));
  // DeepSpeed's defaults (kappa 16): steps 1-16, then every 2nd to 48, every 4th to 112, ...
  ZeroOneSchedule ds{{.var_freeze_step = 100000, .var_update_scaler = 16}};
  for (int t : {1, 16, 18, 48, 52, 112, 120, 240}) EXPECT_TRUE(ds.updates_variance(t)) << t;
  for (int t : {17, 19, 50, 114, 116}) EXPECT_FALSE(ds.updates_variance(t)) << t;
  int updates = 0;
  for (int t = 1; t <= 112; ++t) updates += ds.updates_variance(t);
  EXPECT_EQ(updates, 48);
}

TEST(ZeroOneSchedule, SyncIntervalsDoubleUpToTheClipperAndTheLastStepSyncs) {
  ZeroOneSchedule s{{.var_freeze_step = 8,
                     .var_update_scaler = 2,
                     .local_step_scaler = 4,
                     .local_step_clipper = 3,
                     .last_step = 26}};
  std::vector<int> local;
  for (int t = 1; t <= 26; ++t)
    if (!s.syncs(t)) local.push_back(t);
  EXPECT_EQ(local, (std::vector<int>{13, 15, 17, 18, 21, 22, 25}));
}

Registry two_tensors() {
  Registry reg;
  reg.add("w", {5, 7});      // decay
  reg.add("b", {9}, false);  // no decay
  return reg;
}

// Ranks that agree: the "compressed mean" is the input itself.
struct SameReducer final : Reducer {
  int world() const override { return 2; }
  void average(float*, size_t) override {}
  bool any_rank(bool flag) override { return flag; }
  void begin_sign_average(float*, float*, float*, size_t count, const SignCode&, Part,
                          Input) override {
    n = count;
  }
  SignExchange finish_sign_average(const Part& finish) override {
    ++calls;
    if (finish) finish(0, n);
    return {};
  }
  size_t n = 0;
  int calls = 0;
};

// One rank: nothing to exchange.
struct OneRank final : Reducer {
  int world() const override { return 1; }
  void average(float*, size_t) override {}
  bool any_rank(bool flag) override { return flag; }
  void begin_sign_average(float*, float*, float*, size_t, const SignCode&, Part, Input) override {
    ADD_FAILURE() << "nothing to exchange on one rank";
  }
  SignExchange finish_sign_average(const Part&) override { return {}; }
};

TEST(ZeroOneAdam, StagesFollowTheSchedules) {
  const Registry reg = two_tensors();
  ZeroOneAdam opt(reg, {},
                  {.var_freeze_step = 8,
                   .var_update_scaler = 2,
                   .local_step_scaler = 4,
                   .local_step_clipper = 3,
                   .last_step = 20});
  const char* want = "WWCWCWCCSSSSLSLSLLSS";  // steps 1..20
  for (int t = 0; t < 20; ++t) {
    opt.set_step_count(t);
    const OneBitStage st = *opt.stage(2);
    const char got = "WCSL"[size_t(st)];
    EXPECT_EQ(got, want[t]) << "step " << t + 1;
    EXPECT_EQ(opt.wants_allreduce(2), st == OneBitStage::warmup);
    EXPECT_EQ(*opt.stage(1), OneBitStage::warmup) << "one rank: plain Adam";
  }
}

// After the freeze, local steps and a sync against the float64 recurrence
// p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p) applied step by step; the sync's m is the
// lr-weighted mean of the interval's bias-corrected momenta, times 1 - b1^t.
TEST(ZeroOneAdam, LocalStepsAndTheSyncFollowTheAdamRecurrence) {
  const Registry reg = two_tensors();
  const size_t n = reg.total_numel();
  const AdamWParams hp{0.9, 0.999, 1e-8, 0.1};
  // T_v = {1, 3} (kappa 1), F = 4; syncs 5-8, 10, 12, then 16: steps 13-15 are local.
  const ZeroOneParams zo{.var_freeze_step = 4,
                         .var_update_scaler = 1,
                         .local_step_scaler = 4,
                         .local_step_clipper = 4};
  ZeroOneAdam opt(reg, hp, zo);
  const ZeroOneSchedule& sched = opt.schedule();
  for (int s : {13, 14, 15}) ASSERT_FALSE(sched.syncs(s)) << s;
  ASSERT_TRUE(sched.syncs(16));
  opt.set_step_count(12);
  opt.state_tensors()[2].buffer->data()[2] = 3.0f;  // S: the last of T_v = {1, 3}
  FlatBuffer params(n), g(n);
  std::vector<double> p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    params.data()[i] = opt.anchor().data()[i] = 0.1f * float(i % 5) - 0.2f;
    opt.v().data()[i] = i % 7 == 3 ? 0.0f : 1e-4f * float(1 + i % 3);
    opt.m().data()[i] = 0.01f * float(i % 4) - 0.015f;
    p[i] = params.data()[i], m[i] = opt.m().data()[i], v[i] = opt.v().data()[i];
  }
  const double c2 = 1 - std::pow(hp.beta2, 3.0);
  SameReducer red;
  double lr_sum = 0;
  std::vector<double> weighted(n, 0.0);
  for (int s = 13; s <= 16; ++s) {
    const double lr = 1e-3 * s;
    for (size_t i = 0; i < n; ++i) g.data()[i] = std::sin(0.7 * double(i) + s);
    ASSERT_EQ(*opt.stage(2), s == 16 ? OneBitStage::sync : OneBitStage::local) << s;
    opt.step(params, g, lr, 0.5, red);
    const double c1 = 1 - std::pow(hp.beta1, double(s));
    lr_sum += lr;
    for (const TensorInfo& t : reg.tensors())
      for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
        if (v[i] == 0) {  // no momentum step; decay only
          p[i] -= lr * (t.decay ? hp.weight_decay : 0.0) * p[i];
          continue;
        }
        m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g.data()[i] * 0.5;
        weighted[i] += lr * m[i] / c1;
        p[i] -= lr * (m[i] / c1 / (std::sqrt(v[i] / c2) + hp.eps) +
                      (t.decay ? hp.weight_decay : 0.0) * p[i]);
      }
    for (const TensorInfo& t : reg.tensors())
      for (size_t i = t.offset; i < t.offset + t.numel; ++i)
        ASSERT_NEAR(params.data()[i], p[i], 1e-6 + 1e-5 * std::abs(p[i]))
            << "step " << s << " " << i;
  }
  EXPECT_EQ(red.calls, 1);
  EXPECT_TRUE(opt.replicas_agree());
  const double c1 = 1 - std::pow(hp.beta1, 16.0);
  for (const TensorInfo& t : reg.tensors())
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      if (t.decay) continue;  // u weights decayed tensors' earlier steps by (1 - lr wd)
      EXPECT_NEAR(opt.m().data()[i], weighted[i] / lr_sum * c1, 1e-7) << i;
      EXPECT_EQ(opt.u().data()[i], 0.0f);
      EXPECT_EQ(opt.anchor().data()[i], params.data()[i]);
    }
}

// Between syncs the parameters are D a - u / denominator: restore_params rebuilds them from
// the state alone, bit for bit, as a resume does for every rank; a step on one rank after
// them (a resume on one rank) starts from those parameters and drops the pending u.
TEST(ZeroOneAdam, RestoreParamsRebuildsALocalStepsParametersExactly) {
  const Registry reg = two_tensors();
  const size_t n = reg.total_numel();
  ZeroOneAdam opt(reg, {0.9, 0.999, 1e-8, 0.1},
                  {.var_freeze_step = 2,
                   .var_update_scaler = 1,
                   .local_step_scaler = 4,
                   .local_step_clipper = 8});
  FlatBuffer params(n), g(n);
  for (size_t i = 0; i < n; ++i) params.data()[i] = 0.05f * float(i % 9);
  SameReducer red;
  int locals = 0;
  for (int s = 1; s <= 12; ++s) {
    for (size_t i = 0; i < n; ++i) g.data()[i] = std::cos(0.3 * double(i) * s);
    if (opt.wants_allreduce(2) || *opt.stage(2) != OneBitStage::local) {
      opt.step(params, g, 1e-2, 1.0, red);
      continue;
    }
    opt.step(params, g, 1e-2, 1.0, red);
    ++locals;
    EXPECT_FALSE(opt.replicas_agree());
    FlatBuffer rebuilt(n);  // registry padding as it was; every tensor's element rebuilt
    copy_buffer(rebuilt, params);
    for (const TensorInfo& t : reg.tensors())
      std::fill_n(rebuilt.data() + t.offset, t.numel, std::nanf(""));
    opt.restore_params(rebuilt);
    EXPECT_EQ(std::memcmp(rebuilt.data(), params.data(), params.bytes()), 0) << "step " << s;
  }
  EXPECT_GT(locals, 3);
  // On one rank after a local step (a resume on another world size): the next step is a
  // variance step from those parameters, and the pending local state is folded into them.
  ASSERT_FALSE(opt.replicas_agree());  // step 12 was local
  ASSERT_NE(opt.u().data()[0], 0.0f);
  OneRank one;
  opt.step(params, g, 1e-2, 1.0, one);  // as the one rank of a resumed run
  EXPECT_EQ(opt.u().data()[0], 0.0f);
  for (const TensorInfo& t : reg.tensors())
    EXPECT_TRUE(std::equal(params.data() + t.offset, params.data() + t.offset + t.numel,
                           opt.anchor().data() + t.offset))
        << t.name;
}

// A variance update after d steps weighs its gradient as d steps' worth: v = b2^d v +
// (1 - b2^d) g^2, and the bias correction covers every step up to it.
TEST(ZeroOneAdam, AVarianceUpdateCoversTheStepsSinceTheLast) {
  const Registry reg = two_tensors();
  const size_t n = reg.total_numel();
  const AdamWParams hp{0.9, 0.99, 1e-8, 0.0};
  ZeroOneAdam opt(reg, hp, {.var_freeze_step = 4, .var_update_scaler = 1});  // T_v = {1, 3}
  FlatBuffer p(n), g(n);
  SameReducer red;
  for (int s = 1; s <= 3; ++s) {
    for (size_t i = 0; i < n; ++i) g.data()[i] = 0.1f * float(s) + 0.01f * float(i % 3);
    ASSERT_EQ(opt.wants_allreduce(2), s != 2) << s;
    opt.step(p, g, 1e-3, 1.0, red);
  }
  for (const TensorInfo& t : reg.tensors())
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double g1 = 0.1 + 0.01 * double(i % 3), g3 = 0.3 + 0.01 * double(i % 3);
      const double want = 0.99 * 0.99 * 0.01 * g1 * g1 + (1 - 0.99 * 0.99) * g3 * g3;
      EXPECT_NEAR(opt.v().data()[i], want, 1e-6 * want) << i;
    }
  EXPECT_FLOAT_EQ(opt.state_tensors()[2].buffer->data()[2], 3.0f) << "S";
}

// One rank: every step updates the variance, and the run is AdamW's to float rounding
// (the bias correction of v counts every step).
TEST(ZeroOneAdam, OnOneRankEveryStepIsAdamW) {
  OneRank one;
  const Registry reg = two_tensors();
  const size_t n = reg.total_numel();
  const AdamWParams hp{0.9, 0.999, 1e-8, 0.1};
  ZeroOneAdam opt(reg, hp, {.var_freeze_step = 4, .var_update_scaler = 1});
  AdamW adam(reg, hp);
  FlatBuffer p(n), q(n), g(n);
  for (size_t i = 0; i < n; ++i) p.data()[i] = q.data()[i] = 0.03f * float(i % 11) - 0.1f;
  for (int s = 1; s <= 30; ++s) {
    EXPECT_EQ(*opt.stage(1), OneBitStage::warmup) << s;
    for (size_t i = 0; i < n; ++i) g.data()[i] = std::sin(0.37 * double(i) + 0.5 * s);
    opt.step(p, g, 1e-2, 0.8, one);
    adam.step(q, g, 1e-2, 0.8);
  }
  for (const TensorInfo& t : reg.tensors())
    for (size_t i = t.offset; i < t.offset + t.numel; ++i)
      EXPECT_NEAR(p.data()[i], q.data()[i], 1e-6) << i;
}

TEST(ZeroOneAdam, WarnsWhereItCannotDoAsAsked) {
  Config cfg;
  cfg.optimizer.name = OptimizerKind::zero_one_adam;
  cfg.train.steps = 600;
  EXPECT_EQ(zero_one_warning(cfg, 2), "");
  EXPECT_NE(zero_one_warning(cfg, 1).find("nothing to compress"), std::string::npos);
  cfg.optimizer.zero_one.var_freeze_step = 600;
  EXPECT_NE(zero_one_warning(cfg, 2).find("no step is local"), std::string::npos);
  cfg.optimizer.name = OptimizerKind::adamw;
  EXPECT_EQ(zero_one_warning(cfg, 1), "");
}

}  // namespace
}  // namespace ringstep
