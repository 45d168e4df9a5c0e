// OneBitAdam on one process, with a stand-in Reducer whose "compressed mean" is a known
// sign code: the compression-stage update against a float64 reference (frozen, bias
// corrected v; decay mask), the zero-variance mask, the stage rule and the warnings; state
// on a device-shaped runtime with a reducer that reads BUF against the host's bits.
#include "optim/onebit_adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "core/host_backed_runtime.h"

namespace ringstep {
namespace {

// Two "ranks" that agree: sign_average replaces buf by +-0.5 (the sign code of a fixed
// scale) of the input (the Input's values where one is given), as a compressed exchange
// whose output differs from its input would. It works in two parts, the first ending
// inside a tensor, prepared and finished in a pipeline's order (prepare 1, prepare 2,
// finish 1, finish 2); an abandoned call (no finish) leaves buf alone. With READS_BUF (a
// device path's contract, takes_input() false) it reads each part of buf once prepared.
struct SignReducer final : Reducer {
  explicit SignReducer(bool reads = false) : reads_buf(reads) {}
  int world() const override { return 2; }
  bool takes_input() const override { return !reads_buf; }
  void average(float*, size_t) override {}
  bool any_rank(bool flag) override { return flag; }
  void begin_sign_average(float* b, float* w, float* s, size_t count, const SignCode& code, Part p,
                          Input in) override {
    buf = b, we = w, se = s, n = count, prepare = std::move(p), input = std::move(in);
    last_code = code;
  }
  SignExchange finish_sign_average(const Part& finish) override {
    const size_t cut = n / 2;
    const std::pair<size_t, size_t> parts[2] = {{0, cut}, {cut, n}};
    std::vector<float> x(buf, buf + n);
    for (auto [b, e] : parts) {
      if (prepare) prepare(b, e);
      if (reads_buf) std::copy(buf + b, buf + e, x.begin() + b);
      if (input) {
        std::fill(x.begin() + b, x.begin() + e, 0.0f);
        input(b, e, x.data() + b);
      }
    }
    for (auto [b, e] : parts) {
      for (size_t i = b; i < e; ++i) {
        we[i] += 1.0f;  // visible error, to check the mask clears it
        se[i] += 1.0f;
        if (finish) buf[i] = x[i] < 0 ? -0.5f : 0.5f;
      }
      if (finish) finish(b, e);
    }
    ++calls;
    return {n / 8, 1.0, 4.0};
  }
  ExchangeCost last_gradient_exchange() const override { return gradient; }
  SignCost measure_sign_code(const float*, size_t, const SignCode&) override {
    ++measured;
    return code;
  }
  float *buf = nullptr, *we = nullptr, *se = nullptr;
  size_t n = 0;
  Part prepare;
  Input input;
  int calls = 0;
  SignCode last_code;
  ExchangeCost gradient;  // what the "fp32 AllReduce" of every step cost
  SignCost code;
  int measured = 0;
  bool reads_buf = false;
};

struct Fixture {
  Registry reg;
  AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  Fixture() {
    reg.add("w", {5, 3}, true);
    reg.add("b", {3}, false);
  }
};

TEST(OneBitAdam, CompressedStepUsesFrozenVarianceAndTheExchangedMomentum) {
  Fixture f;
  OneBitAdam ob(f.reg, f.hp, {2, OneBitScale::l2, 7});
  AdamW& adam = ob.adam();
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  FlatBuffer p(f.reg.total_numel()), g(f.reg.total_numel());
  for (size_t i = 0; i < p.size(); ++i) p.data()[i] = nd(gen);
  EXPECT_EQ(ob.stage(2), OneBitStage::warmup);
  for (int t = 0; t < 2; ++t) {
    for (size_t i = 0; i < g.size(); ++i) g.data()[i] = nd(gen);
    adam.step(p.data(), g.data(), 1e-2, 1.0);
  }
  EXPECT_EQ(ob.stage(2), OneBitStage::compressed);
  EXPECT_EQ(ob.stage(1), OneBitStage::warmup) << "nothing to compress on one rank";
  const std::vector<float> v_frozen(adam.v().data(), adam.v().data() + adam.v().size());
  std::vector<double> rp(p.data(), p.data() + p.size());
  SignReducer red;
  const double lr = 1e-2;
  for (int t = 3; t <= 5; ++t) {
    for (size_t i = 0; i < g.size(); ++i) g.data()[i] = nd(gen);
    ob.compressed_step(p.data(), g.data(), lr, 0.5, red);
    for (const auto& ti : f.reg.tensors())
      for (size_t k = ti.offset; k < ti.offset + ti.numel; ++k) {
        const double mh = double(adam.m().data()[k]) / (1 - std::pow(0.9, t));
        const double vh = v_frozen[k] / (1 - std::pow(0.95, 2));
        rp[k] -= lr * (mh / (std::sqrt(vh) + 1e-8) + (ti.decay ? 0.1 * rp[k] : 0.0));
        EXPECT_EQ(std::fabs(adam.m().data()[k]), 0.5f);
      }
  }
  EXPECT_EQ(red.calls, 3);
  EXPECT_EQ(red.last_code.scale, OneBitScale::l2) << "the code is the config's";
  EXPECT_EQ(red.last_code.block, 7u);
  EXPECT_EQ(adam.step_count(), 5);
  for (size_t i = 0; i < v_frozen.size(); ++i) EXPECT_EQ(adam.v().data()[i], v_frozen[i]);
  for (const auto& ti : f.reg.tensors())
    for (size_t k = ti.offset; k < ti.offset + ti.numel; ++k)
      EXPECT_NEAR(p.data()[k], rp[k], 2e-5) << ti.name << " " << k;
}

// A coordinate that never had a gradient (frozen v = 0) gets no +-scale/eps step: its
// momentum and error buffers stay 0 and only weight decay moves it.
TEST(OneBitAdam, ZeroVarianceCoordinatesGetNoMomentumStep) {
  Fixture f;
  OneBitAdam ob(f.reg, f.hp, {1, OneBitScale::mean_abs});
  AdamW& adam = ob.adam();
  FlatBuffer p(f.reg.total_numel()), g(f.reg.total_numel());
  for (size_t i = 0; i < p.size(); ++i) p.data()[i] = 1.0f;
  const size_t dead = f.reg.find("w").offset + 4, bias = f.reg.find("b").offset + 1;
  for (size_t i = 0; i < g.size(); ++i) g.data()[i] = (i == dead || i == bias) ? 0.0f : 0.3f;
  adam.step(p.data(), g.data(), 1e-2, 1.0);
  ASSERT_EQ(adam.v().data()[dead], 0.0f);
  const float p_dead = p.data()[dead], p_bias = p.data()[bias];
  SignReducer red;
  for (size_t i = 0; i < g.size(); ++i) g.data()[i] = (i == dead || i == bias) ? 1.0f : 0.3f;
  ob.compressed_step(p.data(), g.data(), 1e-2, 1.0, red);
  EXPECT_EQ(p.data()[dead], p_dead - float(1e-2 * 0.1) * p_dead) << "decay only";
  EXPECT_EQ(p.data()[bias], p_bias) << "no decay on a bias, no momentum step";
  for (size_t i : {dead, bias}) {
    EXPECT_EQ(adam.m().data()[i], 0.0f);
    EXPECT_EQ(ob.worker_error().data()[i], 0.0f);
    EXPECT_EQ(ob.server_error().data()[i], 0.0f);
  }
  EXPECT_EQ(ob.worker_error().data()[0], 1.0f) << "live coordinates keep their error";
}

std::vector<float> values(const FlatBuffer& b) { return {b.data(), b.data() + b.size()}; }

// An exchange begun under backward and then skipped (an overflow found after the momenta
// were sent) leaves the momentum, both error buffers, v and the step count as they were, bit
// for bit; without may_skip the step's values stay (the documented cost of not keeping them).
TEST(OneBitAdam, SkipUnderBackwardRestoresMomentumAndBothErrors) {
  Fixture f;
  for (bool may_skip : {true, false}) {
    OneBitAdam ob(f.reg, f.hp, {1, OneBitScale::mean_abs, 0, true, may_skip});
    FlatBuffer p(f.reg.total_numel()), g(f.reg.total_numel());
    for (size_t i = 0; i < g.size(); ++i) g.data()[i] = 0.1f * float(i % 7) - 0.25f;
    ob.adam().step(p.data(), g.data(), 1e-2, 1.0);
    SignReducer red;
    ASSERT_TRUE(ob.begin_under_backward(g.data(), 1.0, red));
    ob.step(p, g, 1e-2, 1.0, red);  // one applied step: the error buffers are non-zero
    const auto m = values(ob.adam().m()), v = values(ob.adam().v());
    const auto ew = values(ob.worker_error()), es = values(ob.server_error());
    const auto params = values(p);
    ASSERT_TRUE(ob.begin_under_backward(g.data(), 1.0, red));
    g.data()[3] = NAN;  // read by the reducer once backward reports its part ready
    ob.skip(red);
    EXPECT_EQ(red.calls, 2) << "the skipped step's exchange still completes (a collective)";
    EXPECT_EQ(ob.step_count(), 2);
    EXPECT_EQ(values(p), params);
    EXPECT_EQ(values(ob.adam().v()), v);
    if (!may_skip) {
      EXPECT_NE(values(ob.worker_error()), ew);
      continue;
    }
    EXPECT_EQ(values(ob.adam().m()), m);
    EXPECT_EQ(values(ob.worker_error()), ew);
    EXPECT_EQ(values(ob.server_error()), es);
  }
}

// Resuming on another world size keeps mean_r e_w + e_s: every new rank's worker error is
// the old ranks' mean worker error plus the sum of their server buffers (each holds its
// own chunks, zeros elsewhere), and the server error starts at 0.
TEST(OneBitAdam, WorldChangeFoldsTheServerErrorIntoTheMeanWorkerError) {
  Fixture f;
  OneBitAdam ob(f.reg, f.hp, {1, OneBitScale::mean_abs});
  const size_t n = f.reg.total_numel();
  std::vector<std::vector<FlatBuffer>> saved(3);
  for (int r = 0; r < 3; ++r) {
    saved[r].emplace_back(n);
    saved[r].emplace_back(n);
    for (size_t i = 0; i < n; ++i) {
      saved[r][0].data()[i] = float(r + 1) * 0.25f - float(i) * 0.01f;
      saved[r][1].data()[i] = i % 3 == size_t(r) ? 0.5f + float(i) : 0.0f;  // r's chunk
    }
  }
  ob.server_error().data()[0] = 9.0f;
  ob.adopt_world_change(saved, 3, 2);
  for (size_t i = 0; i < n; ++i) {
    const float mean_w =
        (saved[0][0].data()[i] + saved[1][0].data()[i] + saved[2][0].data()[i]) * (1.0f / 3);
    EXPECT_EQ(ob.worker_error().data()[i], mean_w + (0.5f + float(i))) << i;
    EXPECT_EQ(ob.server_error().data()[i], 0.0f) << i;
  }
}

// State in memory that is not the host's (a device; here host memory underneath) and a
// reducer that reads BUF (a device path): the momentum formed into m by the runtime's pass
// in PREPARE, the update by its pass in FINISH. The same bits as on the host with an
// INPUT: the parameters, m, v and both error buffers, through warm-up, compressed steps
// after backward and under it, a skipped step under backward (m put back from its kept
// copy), and a world-size change (formed on the host, copied to the state's memory).
TEST(OneBitAdam, StateOnADeviceThatReadsBufGivesTheHostsBits) {
  Fixture f;
  testing::HostBackedRuntime device("device");
  const size_t n = f.reg.total_numel();
  const OneBitParams params{1, OneBitScale::mean_abs, 0, true, true};
  OneBitAdam host(f.reg, f.hp, params), dev(f.reg, f.hp, params, device);
  ASSERT_FALSE(dev.worker_error().runtime().host_memory());
  ASSERT_EQ(&dev.adam().m().runtime(), &device);
  SignReducer host_red, dev_red(/*reads=*/true);
  FlatBuffer p_host(n), p_dev(n, device), g_host(n), g_dev(n, device);
  for (size_t i = 0; i < n; ++i) p_host.data()[i] = p_dev.data()[i] = 0.05f * float(i % 5) - 0.1f;
  auto expect_same = [&](const char* when) {
    EXPECT_EQ(values(p_dev), values(p_host)) << when;
    EXPECT_EQ(values(dev.adam().m()), values(host.adam().m())) << when;
    EXPECT_EQ(values(dev.adam().v()), values(host.adam().v())) << when;
    EXPECT_EQ(values(dev.worker_error()), values(host.worker_error())) << when;
    EXPECT_EQ(values(dev.server_error()), values(host.server_error())) << when;
    EXPECT_EQ(dev.step_count(), host.step_count()) << when;
  };
  for (int t = 0; t < 6; ++t) {
    for (size_t i = 0; i < n; ++i)
      g_host.data()[i] = g_dev.data()[i] = 0.1f * float((i * 7 + size_t(t)) % 11) - 0.5f;
    const bool under = t % 2 == 1, skipped = t == 3;
    for (auto [opt, red, p, g] : {std::tuple{&host, &host_red, &p_host, &g_host},
                                  std::tuple{&dev, &dev_red, &p_dev, &g_dev}}) {
      if (under) ASSERT_EQ(opt->begin_under_backward(g->data(), 0.75, *red), t > 0);
      if (skipped)
        opt->skip(*red);
      else
        opt->step(*p, *g, 1e-2, 0.75, *red);
    }
    expect_same(skipped ? "after a skip" : "after a step");
  }
  EXPECT_EQ(host_red.calls, 5);
  EXPECT_EQ(dev_red.calls, 5);
  std::vector<std::vector<FlatBuffer>> saved(2);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) {
      FlatBuffer& b = saved[size_t(r)].emplace_back(n);
      for (size_t i = 0; i < n; ++i) b.data()[i] = 0.01f * float(i) - 0.3f * float(r + k);
    }
  host.adopt_world_change(saved, 2, 3);
  dev.adopt_world_change(saved, 2, 3);
  expect_same("after a world change");
}

// compress: auto's rule: compress where the fp32 AllReduce's exposed time exceeds the
// coding's plus the 1-bit exchange's predicted exposed time (its time in flight, scaled by
// the bytes, less the window the fp32 exchange had under backward).
TEST(OneBitAdam, CompressChoiceWeighsExposedTimeAgainstCodingAndTheSmallerExchange) {
  // 100 ms in flight, 30 exposed (70 hidden); 1/32 of the bytes: 3.125 ms, all hidden.
  CompressChoice c{30.0, 100.0, 3200.0, 100.0, 29.0};
  EXPECT_EQ(c.compressed_exposed_ms(), 0.0);
  EXPECT_TRUE(c.compress());
  c.code_ms = 30.0;
  EXPECT_FALSE(c.compress()) << "coding costs what it saves";
  // A slow link: 3200 ms in flight, 3100 exposed; the 1-bit exchange takes 100, 0 hidden.
  c = {3100.0, 3200.0, 3200.0, 100.0, 40.0};
  EXPECT_EQ(c.compressed_exposed_ms(), 0.0) << "100 ms fit in the 100 ms window";
  EXPECT_TRUE(c.compress());
  c = {3190.0, 3200.0, 3200.0, 100.0, 40.0, 5};
  EXPECT_EQ(c.compressed_exposed_ms(), 90.0);
  EXPECT_TRUE(c.compress());
  EXPECT_NE(c.describe().find("compressing from step 5: the fp32 AllReduce left 3190.0 ms a "
                              "step exposed; coding costs 40.0 ms and the 1-bit exchange (1/32 "
                              "of the bytes) would leave 90.0 ms exposed"),
            std::string::npos)
      << c.describe();
}

// compress: auto decides once, at the last warm-up step, from that step's measurements
// (the first two, cold, left out); the choice is state a checkpoint saves, and the log
// line comes once. never stays AdamW.
TEST(OneBitAdam, CompressAutoDecidesAtTheEndOfTheWarmUpAndKeepsTheChoice) {
  Fixture f;
  for (double exposed : {50.0, 1.0}) {
    OneBitAdam ob(f.reg, f.hp, {4, OneBitScale::mean_abs, 0, false, false, OneBitCompress::auto_});
    FlatBuffer p(f.reg.total_numel()), g(f.reg.total_numel());
    for (size_t i = 0; i < g.size(); ++i) g.data()[i] = 0.01f * float(i % 5) - 0.02f;
    SignReducer red;
    red.gradient = {60.0, exposed, 3200};
    red.code = {5.0, 100};
    for (int t = 1; t <= 4; ++t) {
      EXPECT_EQ(ob.stage(2), OneBitStage::warmup) << t;
      EXPECT_FALSE(ob.compressing().has_value()) << t;
      ob.step(p, g, 1e-2, 1.0, red);
      EXPECT_EQ(ob.take_note().empty(), t < 4) << t;
    }
    EXPECT_EQ(red.measured, 1);
    ASSERT_TRUE(ob.compressing().has_value());
    EXPECT_EQ(*ob.compressing(), exposed > 5.0);
    // The numbers it compared, for the summary: the reducer's, the decision the same.
    const std::optional<CompressChoice> choice = ob.compress_choice();
    ASSERT_TRUE(choice.has_value());
    EXPECT_EQ(choice->exposed_ms, exposed);
    EXPECT_EQ(choice->comm_ms, 60.0);
    EXPECT_EQ(choice->sent_bytes, 3200.0);
    EXPECT_EQ(choice->sign_bytes, 100.0);
    EXPECT_EQ(choice->code_ms, 5.0);
    EXPECT_EQ(choice->from_step, 5);
    EXPECT_EQ(choice->compress(), *ob.compressing());
    EXPECT_EQ(ob.stage(2), exposed > 5.0 ? OneBitStage::compressed : OneBitStage::warmup);
    ob.step(p, g, 1e-2, 1.0, red);
    EXPECT_EQ(ob.take_note(), "") << "one line";
    const std::vector<StateTensor> st = ob.state_tensors();
    ASSERT_EQ(st[2].name, "onebit_choice");
    EXPECT_TRUE(st[2].optional && !st[2].per_rank);
    OneBitAdam resumed(f.reg, f.hp,
                       {4, OneBitScale::mean_abs, 0, false, false, OneBitCompress::auto_});
    ASSERT_EQ(st[3].name, "onebit_choice_costs");
    EXPECT_TRUE(st[3].optional && !st[3].per_rank);
    resumed.set_step_count(ob.step_count());
    EXPECT_FALSE(resumed.compress_choice().has_value());
    resumed.state_tensors()[2].buffer->data()[0] = st[2].buffer->data()[0];
    EXPECT_EQ(resumed.stage(2), ob.stage(2)) << "the choice survives a checkpoint";
    EXPECT_FALSE(resumed.compress_choice().has_value()) << "a checkpoint without the numbers";
    copy_buffer(*resumed.state_tensors()[3].buffer, *st[3].buffer);
    ASSERT_TRUE(resumed.compress_choice().has_value());
    EXPECT_EQ(resumed.compress_choice()->describe(), choice->describe());
  }
  OneBitAdam never(f.reg, f.hp, {1, OneBitScale::mean_abs, 0, false, false, OneBitCompress::never});
  never.set_step_count(10);
  EXPECT_EQ(never.stage(2), OneBitStage::warmup);
}

TEST(OneBitAdam, WarnsWhenItWillRunAsPlainAdam) {
  Config cfg = parse_config("", "t");
  EXPECT_EQ(onebit_warning(cfg, 1), "") << "AdamW: nothing to say";
  cfg.optimizer.name = OptimizerKind::onebit_adam;
  cfg.train.steps = 100;
  cfg.optimizer.onebit.freeze_step = 20;
  cfg.optimizer.betas = {0.9, 0.999};
  EXPECT_EQ(onebit_warning(cfg, 2), "");
  cfg.optimizer.betas = {0.9, 0.95};  // the default: a short-memory variance is frozen
  EXPECT_NE(onebit_warning(cfg, 2).find("betas[1] is 0.95: the variance averages about 20 "
                                        "steps and is frozen at step 20"),
            std::string::npos)
      << onebit_warning(cfg, 2);
  EXPECT_NE(onebit_warning(cfg, 1).find("nothing to compress"), std::string::npos);
  cfg.optimizer.onebit.freeze_step = 100;
  EXPECT_NE(onebit_warning(cfg, 2).find("freeze_step (100) >= train.steps (100)"),
            std::string::npos)
      << onebit_warning(cfg, 2);
}

}  // namespace
}  // namespace ringstep
