// The whole model's wiring, checked against finite differences. Each op's backward is
// checked exactly in float64 by tests/core/cpu/ops_test.cpp; here the model runs in fp32,
// so central differences carry rounding noise of about eps_f32 * loss / h = 6e-8 * 6 / 1e-2
// ~ 4e-5 plus truncation O(h^2): we compare only coordinates whose gradient is well above
// that noise, with 2% relative tolerance. A wiring mistake (a missing residual, a wrong
// operand) is off by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "models/device_shaped_runtime.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

ModelConfig TinyModel() {
  ModelConfig m;
  m.vocab_size = 13;
  m.seq_len = 6;
  m.d_model = 8;
  m.n_layers = 2;
  m.n_heads = 2;
  return m;
}


double LossAt(Gpt& m, const Batch& b, int B, int T, Arena& arena) {
  return m.evaluate(b.in.data(), b.tg.data(), B, T, arena);
}

TEST(Gpt, GradientMatchesFiniteDifferences) {
  const ModelConfig mc = TinyModel();
  const int B = 2, T = 5;
  Gpt m(mc);
  m.init(7);
  // Perturb LayerNorm weights and biases away from 1/0 so their gradients are generic.
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  for (const auto& t : m.registry().tensors())
    if (t.shape.size() == 1)
      for (size_t i = 0; i < t.numel; ++i) m.params().at(t)[i] += nd(gen);
  Batch b = MakeBatch(B, T, mc.vocab_size, 11);
  Arena arena(m.count_arena_bytes(B, T));
  m.grads().zero();
  m.forward(b.in.data(), b.tg.data(), B, T, arena);
  m.backward(1.0f, arena);

  const float h = 1e-2f;
  int checked = 0;
  for (const auto& t : m.registry().tensors()) {
    float* w = m.params().at(t);
    const float* g = m.grads().at(t);
    for (size_t i = 0; i < t.numel; i += std::max<size_t>(1, t.numel / 7)) {
      if (std::fabs(g[i]) < 2e-3) continue;  // below the FD noise floor (see top)
      const float saved = w[i];
      w[i] = saved + h;
      const double up = LossAt(m, b, B, T, arena);
      w[i] = saved - h;
      const double down = LossAt(m, b, B, T, arena);
      w[i] = saved;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(g[i], fd, 0.02 * std::fabs(fd) + 2e-4) << t.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(Gpt, BackwardAddsIntoGradients) {
  const ModelConfig mc = TinyModel();
  Gpt m(mc);
  m.init(1);
  Batch b = MakeBatch(2, 6, mc.vocab_size, 2);
  Arena arena(m.count_arena_bytes(2, 6));
  m.grads().zero();
  m.forward(b.in.data(), b.tg.data(), 2, 6, arena);
  m.backward(1.0f, arena);
  std::vector<float> once(m.grads().data(), m.grads().data() + m.grads().size());
  m.forward(b.in.data(), b.tg.data(), 2, 6, arena);
  m.backward(1.0f, arena);
  // Adding the same contributions twice is exact up to the order of fp32 additions.
  float max_abs = 0;
  for (float x : once) max_abs = std::max(max_abs, std::fabs(x));
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(m.grads().data()[i], 2 * once[i], 1e-6f * max_abs) << i;
}

TEST(Gpt, GradientAccumulationMatchesOneLargeBatch) {
  // micro_batch 2 x 4 accumulation steps (each loss / 4) == micro_batch 8 x 1.
  const ModelConfig mc = TinyModel();
  const int T = 6;
  Gpt m(mc);
  m.init(5);
  Batch big = MakeBatch(8, T, mc.vocab_size, 9);
  Arena arena(m.count_arena_bytes(8, T));
  m.grads().zero();
  m.forward(big.in.data(), big.tg.data(), 8, T, arena);
  m.backward(1.0f, arena);
  std::vector<float> ref(m.grads().data(), m.grads().data() + m.grads().size());
  m.grads().zero();
  for (int k = 0; k < 4; ++k) {
    const int32_t* in = big.in.data() + k * 2 * T;
    const int32_t* tg = big.tg.data() + k * 2 * T;
    m.forward(in, tg, 2, T, arena);
    m.backward(0.25f, arena);
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += std::pow(double(m.grads().data()[i]) - ref[i], 2);
    den += std::pow(double(ref[i]), 2);
  }
  EXPECT_LE(std::sqrt(num / den), 1e-5);
}

TEST(Gpt, SameSeedSameWeights) {
  Gpt a(TinyModel()), b(TinyModel()), c(TinyModel());
  a.init(42);
  b.init(42);
  c.init(43);
  EXPECT_EQ(0, std::memcmp(a.params().data(), b.params().data(), a.params().bytes()));
  EXPECT_NE(0, std::memcmp(a.params().data(), c.params().data(), a.params().bytes()));
}

// model.pad_vocab_to_multiple: the padded model is the same model. Its real weights are the
// unpadded one's (same seed), its padded rows zero; loss and every real gradient agree
// (the logits' products only gain rows), and the padded rows' gradient is exactly zero.
TEST(Gpt, PaddedVocabularyIsTheSameModel) {
  const ModelConfig mc = TinyModel();  // vocab 13
  ModelConfig padded = mc;
  padded.pad_vocab_to_multiple = 8;
  Gpt a(mc), b(padded);
  ASSERT_EQ(GptSpec::vocab_rows(padded), 16);
  a.init(7);
  b.init(7);
  const TensorInfo& wa = a.registry().at(a.spec().wte());
  const TensorInfo& wb = b.registry().at(b.spec().wte());
  ASSERT_EQ(wb.numel, size_t(16 * mc.d_model));
  const size_t real = wa.numel, pad = wb.numel - wa.numel;
  EXPECT_EQ(std::memcmp(a.params().at(wa), b.params().at(wb), real * sizeof(float)), 0);
  EXPECT_EQ(std::count(b.params().at(wb) + real, b.params().at(wb) + wb.numel, 0.0f), long(pad));
  for (size_t i = 0; i < a.registry().size(); ++i) {
    if (i == a.spec().wte()) continue;
    const TensorInfo& ta = a.registry().at(i);
    EXPECT_EQ(std::memcmp(a.params().at(ta), b.params().at(b.registry().at(i)),
                          ta.numel * sizeof(float)),
              0)
        << ta.name;
  }
  const Batch batch = MakeBatch(2, 6, mc.vocab_size, 4);
  Arena arena_a(a.count_arena_bytes(2, 6)), arena_b(b.count_arena_bytes(2, 6));
  a.grads().zero();
  b.grads().zero();
  const float la = a.forward(batch.in.data(), batch.tg.data(), 2, 6, arena_a);
  const float lb = b.forward(batch.in.data(), batch.tg.data(), 2, 6, arena_b);
  EXPECT_NEAR(lb, la, 1e-6 * la);
  a.backward(1.0f, arena_a);
  b.backward(1.0f, arena_b);
  for (size_t i = 0; i < a.registry().size(); ++i) {
    const TensorInfo& ta = a.registry().at(i);
    const float* ga = a.grads().at(ta);
    const float* gb = b.grads().at(b.registry().at(i));
    float scale = 0;
    for (size_t k = 0; k < ta.numel; ++k) scale = std::max(scale, std::fabs(ga[k]));
    for (size_t k = 0; k < ta.numel; ++k)
      ASSERT_NEAR(gb[k], ga[k], 1e-5f * scale + 1e-9f) << ta.name << "[" << k << "]";
  }
  const float* gpad = b.grads().at(wb) + real;
  EXPECT_EQ(std::count(gpad, gpad + pad, 0.0f), long(pad));
  // The FLOPs count the model, not its padding.
  EXPECT_EQ(b.spec().flops_param_count(), a.spec().flops_param_count());
}

// Where the parameters are not in host memory, each micro-batch's inputs and targets go up
// in one upload from one pinned buffer (pinned once, refilled only after the last upload is
// waited for), and the ops read the uploaded copies: the same losses and gradients, bit for
// bit, as the model on the CPU's own memory.
TEST(Gpt, UploadsEachMicroBatchsTokensOnceFromOnePinnedBuffer) {
  const ModelConfig mc = TinyModel();
  const int B = 2, T = 5, micro_batches = 3;
  DeviceShapedRuntime rt;
  {
    Gpt host(mc), dev(mc, {}, rt);
    host.init(11);
    dev.init(11);
    Arena host_arena(host.count_arena_bytes(B, T)), dev_arena(dev.count_arena_bytes(B, T));
    EXPECT_TRUE(rt.uploads.empty());
    for (int k = 0; k < micro_batches; ++k) {
      const Batch b = MakeBatch(B, T, mc.vocab_size, 20 + unsigned(k));
      const float lh = host.forward(b.in.data(), b.tg.data(), B, T, host_arena);
      const float ld = dev.forward(b.in.data(), b.tg.data(), B, T, dev_arena);
      EXPECT_EQ(std::memcmp(&lh, &ld, sizeof lh), 0) << "micro-batch " << k;
      host.backward(1.0f / micro_batches, host_arena);
      dev.backward(1.0f / micro_batches, dev_arena);
      ASSERT_EQ(rt.uploads.size(), size_t(k) + 1);
    }
    ASSERT_EQ(host.grads().size(), dev.grads().size());
    EXPECT_EQ(std::memcmp(host.grads().data(), dev.grads().data(),
                          host.grads().size() * sizeof(float)),
              0);
    for (const auto& u : rt.uploads) {
      EXPECT_EQ(u.bytes, 2 * size_t(B) * T * sizeof(int32_t));  // inputs and targets together
      EXPECT_EQ(u.host, rt.uploads[0].host);                       // one staging buffer
    }
    EXPECT_EQ(rt.pins, 1);
    EXPECT_EQ(rt.reused_before_wait, 0);
    // Evaluation uploads once too.
    const Batch b = MakeBatch(B, T, mc.vocab_size, 30);
    EXPECT_EQ(host.evaluate(b.in.data(), b.tg.data(), B, T, host_arena),
              dev.evaluate(b.in.data(), b.tg.data(), B, T, dev_arena));
    EXPECT_EQ(rt.uploads.size(), size_t(micro_batches) + 1);
    EXPECT_EQ(rt.unpins, 0);
  }
  EXPECT_EQ(rt.unpins, 1);  // the model unpins its buffer when it goes
}

}  // namespace
}  // namespace ringstep
