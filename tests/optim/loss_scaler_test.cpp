#include "optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ringstep {
namespace {

PrecisionConfig precision(DType dtype, LossScaleMode mode) {
  PrecisionConfig p;
  p.dtype = dtype;
  p.loss_scale.mode = mode;
  return p;
}

PrecisionConfig dynamic_fp16(double initial, int growth_interval, int hysteresis = 1) {
  PrecisionConfig p = precision(DType::f16, LossScaleMode::dynamic);
  p.loss_scale.initial = initial;
  p.loss_scale.growth_interval = growth_interval;
  p.loss_scale.hysteresis = hysteresis;
  return p;
}

// N updates with the same flag; true if every one applied its step.
bool feed(LossScaler& s, bool found_inf, int n) {
  bool applied = true;
  for (int i = 0; i < n; ++i) applied &= s.update(found_inf);
  return applied;
}

TEST(LossScaler, AutoIsDynamicForFp16AndNoneOtherwise) {
  EXPECT_EQ(PrecisionConfig{}.loss_scale.mode, LossScaleMode::auto_);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::f16, LossScaleMode::auto_)),
            LossScaleMode::dynamic);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::bf16, LossScaleMode::auto_)),
            LossScaleMode::none);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::f32, LossScaleMode::auto_)),
            LossScaleMode::none);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::bf16, LossScaleMode::dynamic)),
            LossScaleMode::dynamic);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::f16, LossScaleMode::static_)),
            LossScaleMode::static_);
  EXPECT_EQ(resolved_loss_scale_mode(precision(DType::f16, LossScaleMode::none)),
            LossScaleMode::none);

  LossScaler fp16(precision(DType::f16, LossScaleMode::auto_));
  EXPECT_EQ(fp16.mode(), LossScaleMode::dynamic);
  EXPECT_EQ(fp16.scale(), 65536.0);
  LossScaler bf16(precision(DType::bf16, LossScaleMode::auto_));
  EXPECT_EQ(bf16.mode(), LossScaleMode::none);
  EXPECT_EQ(bf16.scale(), 1.0);
}

TEST(LossScaler, GrowsAfterExactlyGrowthIntervalCleanSteps) {
  LossScaler s(dynamic_fp16(1024, 5));
  EXPECT_TRUE(feed(s, false, 4));
  EXPECT_EQ(s.scale(), 1024.0);  // not one step early
  EXPECT_EQ(s.state().growth_tracker, 4);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  feed(s, false, 4);
  EXPECT_EQ(s.scale(), 2048.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 4096.0);
}

TEST(LossScaler, OverflowRestartsTheGrowthCount) {
  LossScaler s(dynamic_fp16(1024, 5, /*hysteresis=*/2));  // the overflow does not back off
  feed(s, false, 4);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  feed(s, false, 4);
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 2048.0);
}

TEST(LossScaler, HysteresisNeedsThatManyOverflowsAndReArmsOnlyAtGrowth) {
  LossScaler s(dynamic_fp16(1024, 4, /*hysteresis=*/3));
  EXPECT_EQ(s.state().hysteresis_tracker, 3);
  EXPECT_FALSE(feed(s, true, 2));
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.state().hysteresis_tracker, 1);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 512.0);  // the third overflow backs off
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 256.0);  // run out: every overflow backs off now
  // Clean steps short of a growth do not re-arm it (Megatron-LM).
  feed(s, false, 3);
  s.update(true);
  EXPECT_EQ(s.scale(), 128.0);
  // A growth does: three overflows again before the next backoff.
  feed(s, false, 4);
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.state().hysteresis_tracker, 3);
  feed(s, true, 2);
  EXPECT_EQ(s.scale(), 256.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 128.0);
}

TEST(LossScaler, MinScaleHolds) {
  PrecisionConfig p = dynamic_fp16(8, 1000);
  p.loss_scale.min_scale = 2;
  LossScaler s(p);
  const std::vector<double> expected = {4, 2, 2, 2};
  for (double e : expected) {
    EXPECT_FALSE(s.update(true));
    EXPECT_EQ(s.scale(), e);
  }
  p = dynamic_fp16(10, 1000);  // a backoff that steps over the floor lands on it
  p.loss_scale.min_scale = 3;
  LossScaler t(p);
  t.update(true);
  EXPECT_EQ(t.scale(), 5.0);
  t.update(true);
  EXPECT_EQ(t.scale(), 3.0);
}

TEST(LossScaler, GrowthStopsAtMaxLossScale) {
  PrecisionConfig p = dynamic_fp16(kMaxLossScale / 2, 1);
  p.loss_scale.growth_factor = 3;
  LossScaler s(p);
  s.update(false);
  EXPECT_EQ(s.scale(), kMaxLossScale);
  s.update(false);
  EXPECT_EQ(s.scale(), kMaxLossScale);
}

TEST(LossScaler, StaticNeverChangesButSkips) {
  PrecisionConfig p = dynamic_fp16(512, 2);
  p.loss_scale.mode = LossScaleMode::static_;
  LossScaler s(p);
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_TRUE(feed(s, false, 10));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_FALSE(feed(s, true, 5));
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.state().skipped_total, 5);
  EXPECT_EQ(s.state().consecutive_skips, 5);
}

TEST(LossScaler, NoneNeverChangesButSkips) {
  for (const PrecisionConfig& p :
       {precision(DType::f16, LossScaleMode::none), precision(DType::f32, LossScaleMode::auto_),
        precision(DType::bf16, LossScaleMode::auto_)}) {
    LossScaler s(p);
    EXPECT_EQ(s.scale(), 1.0) << name(p.dtype);
    EXPECT_TRUE(feed(s, false, 3000));  // past growth_interval
    EXPECT_EQ(s.scale(), 1.0) << name(p.dtype);
    EXPECT_FALSE(s.update(true)) << name(p.dtype);
    EXPECT_EQ(s.scale(), 1.0) << name(p.dtype);
    EXPECT_EQ(s.state().skipped_total, 1) << name(p.dtype);
  }
}

TEST(LossScaler, StopFiresExactlyAtMaxConsecutiveSkipsAndResetsOnCleanStep) {
  PrecisionConfig p = dynamic_fp16(1024, 100);
  p.loss_scale.max_consecutive_skips = 4;
  LossScaler s(p);
  feed(s, true, 3);
  EXPECT_FALSE(s.should_stop());
  s.update(false);  // a clean step ends the run of skips
  EXPECT_EQ(s.state().consecutive_skips, 0);
  feed(s, true, 3);
  EXPECT_FALSE(s.should_stop());
  s.update(true);
  EXPECT_TRUE(s.should_stop());
  EXPECT_EQ(s.state().consecutive_skips, 4);
  EXPECT_EQ(s.state().skipped_total, 7);
}

TEST(LossScaler, StopMessageSaysWhatHappenedAndWhatToTry) {
  auto stopped = [](PrecisionConfig p) {
    p.loss_scale.max_consecutive_skips = 3;
    LossScaler s(p);
    feed(s, true, 3);
    EXPECT_TRUE(s.should_stop());
    return s.stop_message();
  };
  // Dynamic, still backing off when stopped.
  PrecisionConfig p = dynamic_fp16(1024, 100, /*hysteresis=*/3);
  std::string m = stopped(p);
  EXPECT_TRUE(
      m.starts_with("3 optimizer steps in a row were skipped because the gradients held "
                    "inf or NaN (precision.loss_scale.max_consecutive_skips is 3; dtype "
                    "fp16, loss scale mode dynamic, scale now 512)"))
      << m;
  EXPECT_NE(m.find("raise precision.loss_scale.max_consecutive_skips"), std::string::npos) << m;
  EXPECT_NE(m.find("lower train.lr"), std::string::npos) << m;
  EXPECT_NE(m.find("precision.dtype bf16"), std::string::npos) << m;
  // Dynamic, at min_scale: the model itself overflows. Quoted in docs/precision.md.
  p = dynamic_fp16(4, 100);
  m = stopped(p);
  EXPECT_EQ(m,
            "3 optimizer steps in a row were skipped because the gradients held inf or NaN "
            "(precision.loss_scale.max_consecutive_skips is 3; dtype fp16, loss scale mode "
            "dynamic, scale now 1). The scale is at min_scale and the gradients still overflow, "
            "so the model itself produces inf/NaN. Try: lower train.lr or lengthen "
            "train.warmup_steps; check the data (a bad token file); use precision.dtype bf16 "
            "(fp32's range, no scaling needed); then rerun with the same run.out_dir to resume "
            "from the last checkpoint (with checkpoint.every > 0).");
  EXPECT_NE(m.find("at min_scale"), std::string::npos) << m;
  EXPECT_EQ(m.find("lower precision.loss_scale.min_scale"), std::string::npos) << m;
  p.loss_scale.min_scale = 2;
  EXPECT_NE(stopped(p).find("lower precision.loss_scale.min_scale"), std::string::npos);
  // Static and none.
  p.loss_scale.mode = LossScaleMode::static_;
  EXPECT_NE(stopped(p).find("A static scale of 4 overflows"), std::string::npos);
  m = stopped(precision(DType::f32, LossScaleMode::auto_));
  EXPECT_NE(m.find("mode none"), std::string::npos) << m;
  EXPECT_EQ(m.find("bf16"), std::string::npos) << m;  // no dtype advice outside fp16
}

TEST(LossScaler, UnscaleAndCheckFindsOneNonFiniteAnywhere) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LossScaler s(dynamic_fp16(1024, 100));
  LossScaler one(precision(DType::f32, LossScaleMode::auto_));  // scale 1: check only
  // Lengths around and beyond the widest vector (16 floats), with tails of any size.
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000 * 16 + 7}}) {
    std::vector<float> clean(n);
    for (size_t i = 0; i < n; ++i) clean[i] = std::ldexp(float(int(i % 97) - 48), 3);
    std::vector<float> g = clean;
    EXPECT_FALSE(s.unscale_and_check(g.data(), n)) << n;
    g = clean;
    EXPECT_FALSE(one.unscale_and_check(g.data(), n)) << n;
    for (size_t at : {size_t{0}, n / 2, n - 1, n - 1 - (n % 16) / 2}) {
      for (float bad : {inf, -inf, nan}) {
        g = clean;
        g[at] = bad;
        EXPECT_TRUE(s.unscale_and_check(g.data(), n)) << n << " " << at << " " << bad;
        g = clean;
        g[at] = bad;
        EXPECT_TRUE(one.unscale_and_check(g.data(), n)) << n << " " << at << " " << bad;
      }
    }
  }
}

TEST(LossScaler, UnscaleMultipliesExactlyByTheInverse) {
  const size_t n = 1000 * 16 + 9;
  std::vector<float> g(n);
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1000.0f);
  for (float& x : g) x = nd(gen);
  g[3] = std::numeric_limits<float>::max();                // large but finite stays finite
  g[4] = std::numeric_limits<float>::denorm_min() * 1024;  // exact down to subnormals
  const std::vector<float> before = g;
  LossScaler s(dynamic_fp16(1024, 100));  // a power of two: 1/S is exact
  EXPECT_FALSE(s.unscale_and_check(g.data(), n));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(g[i], std::ldexp(before[i], -10)) << i;

  std::vector<float> h = before;  // at scale 1 the buffer is not touched
  LossScaler one(precision(DType::bf16, LossScaleMode::auto_));
  EXPECT_FALSE(one.unscale_and_check(h.data(), n));
  EXPECT_EQ(std::memcmp(h.data(), before.data(), n * sizeof(float)), 0);

  PrecisionConfig below_one = dynamic_fp16(0.5, 100);  // unscaling can itself overflow
  below_one.loss_scale.min_scale = 0.25;
  h = before;
  EXPECT_TRUE(LossScaler(below_one).unscale_and_check(h.data(), n));
}

// Megatron-LM's DynamicGradScaler.update, written out as in megatron/core/optimizer/
// grad_scaler.py (plus ringstep's 2^24 ceiling), against a random run of overflows.
TEST(LossScaler, MatchesMegatronDynamicGradScaler) {
  const double initial = 4096, growth = 2, backoff = 0.5, min_scale = 1;
  const int interval = 7, hysteresis = 3;
  PrecisionConfig p = dynamic_fp16(initial, interval, hysteresis);
  p.loss_scale.max_consecutive_skips = 1 << 30;
  LossScaler s(p);
  double scale = initial;
  int growth_tracker = 0, hysteresis_tracker = hysteresis;
  std::mt19937 gen(3);
  std::bernoulli_distribution overflow(0.08);
  int backoffs = 0, growths = 0;
  for (int step = 0; step < 20000; ++step) {
    const bool found = overflow(gen);
    const double was = scale;
    if (found) {
      growth_tracker = 0;
      hysteresis_tracker -= 1;
      if (hysteresis_tracker <= 0) scale = std::max(scale * backoff, min_scale);
    } else {
      growth_tracker += 1;
      if (growth_tracker == interval) {
        growth_tracker = 0;
        hysteresis_tracker = hysteresis;
        scale = std::min(scale * growth, kMaxLossScale);
      }
    }
    backoffs += scale < was;
    growths += scale > was;
    ASSERT_EQ(s.update(found), !found) << step;
    ASSERT_EQ(s.scale(), scale) << step;
    ASSERT_EQ(s.state().growth_tracker, growth_tracker) << step;
  }
  EXPECT_GT(backoffs, 100);  // the run exercised both directions
  EXPECT_GT(growths, 100);
}

TEST(LossScaler, RestoreRoundTrips) {
  PrecisionConfig p = dynamic_fp16(1024, 3, 2);
  LossScaler a(p);
  feed(a, false, 2);
  feed(a, true, 3);
  feed(a, false, 1);
  feed(a, true, 1);
  const LossScalerState saved = a.state();
  EXPECT_EQ(saved.skipped_total, 4);
  LossScaler b(p);
  b.restore(saved);
  EXPECT_EQ(b.state(), saved);
  EXPECT_EQ(b.scale(), a.scale());
  for (bool found : {false, false, false, true, true, false, true}) {
    EXPECT_EQ(a.update(found), b.update(found));
    EXPECT_EQ(a.state(), b.state());
  }
}

TEST(LossScaler, WarnsAboutRiskyButAllowedConfigs) {
  EXPECT_EQ(loss_scale_warning(PrecisionConfig{}), "");
  EXPECT_EQ(loss_scale_warning(precision(DType::f16, LossScaleMode::auto_)), "");
  EXPECT_EQ(loss_scale_warning(precision(DType::bf16, LossScaleMode::none)), "");
  std::string w = loss_scale_warning(precision(DType::f16, LossScaleMode::none));
  EXPECT_TRUE(
      w.starts_with("precision.dtype is fp16 with precision.loss_scale.mode none: "
                    "gradients below 2^-24"))
      << w;
  EXPECT_NE(w.find("Use mode auto"), std::string::npos) << w;
  PrecisionConfig p = precision(DType::f16, LossScaleMode::static_);
  p.loss_scale.initial = 1;
  p.loss_scale.min_scale = 1;
  EXPECT_NE(loss_scale_warning(p).find("static with initial 1 under fp16"), std::string::npos);
  p.loss_scale.initial = 1024;
  EXPECT_EQ(loss_scale_warning(p), "");
  p = dynamic_fp16(1024, 100, /*hysteresis=*/50);
  w = loss_scale_warning(p);  // max_consecutive_skips is 50
  EXPECT_NE(w.find("hysteresis (50) >= max_consecutive_skips (50)"), std::string::npos) << w;
}

}  // namespace
}  // namespace ringstep
