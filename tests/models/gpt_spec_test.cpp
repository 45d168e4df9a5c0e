// The model's spec against what a built Gpt allocates and runs: the parameter count against
// the closed form, the flat buffers' sizes, the activation arena against the counting
// arena for every recompute policy, and every op's calls, FLOPs and bytes against what the
// timed backend records for a real forward and backward.
#include "models/gpt_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "core/arena.h"
#include "core/error.h"
#include "models/device_shaped_runtime.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

// d_model 24: the biases and LayerNorm weights (24 floats) are padded to 32 in the buffer.
ModelConfig Model() {
  ModelConfig m;
  m.vocab_size = 50;
  m.seq_len = 40;
  m.d_model = 24;
  m.n_layers = 3;
  m.n_heads = 2;
  return m;
}

TEST(GptSpec, ParameterCountIsTheClosedFormAndTheBuffersAreWhatGptAllocates) {
  for (const ModelConfig& m : {Model(), ModelConfig{}}) {
    const GptSpec spec(m);
    const double V = m.vocab_size, T = m.seq_len, C = m.d_model, L = m.n_layers;
    EXPECT_EQ(double(spec.param_count()), V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C);
    EXPECT_EQ(double(spec.flops_param_count()), double(spec.param_count()) - T * C);
    Gpt g(m);
    EXPECT_EQ(g.param_count(), spec.param_count());
    EXPECT_EQ(g.params().size(), spec.registry().total_numel());
    EXPECT_EQ(GptSpec::buffer_elements(m), double(g.params().size()));
    EXPECT_EQ(g.grads().size(), spec.registry().total_numel());
    // 6N + 6LCT with N = all parameters but the position embeddings.
    EXPECT_DOUBLE_EQ(g.model_flops_per_token(),
                     6 * double(spec.flops_param_count()) + 6.0 * L * C * T);
  }
}

TEST(GptSpec, RefusesAModelBeyondWhatADoubleCounts) {
  ModelConfig m = Model();
  m.d_model = 1 << 30;
  m.n_layers = 1000;
  EXPECT_THROW(GptSpec{m}, InputError);
}

TEST(GptSpec, EachBlockIsOneContiguousRange) {
  const GptSpec spec(Model());
  size_t prev_end = spec.embedding_ranges()[1].second;
  for (int l = 0; l < Model().n_layers; ++l) {
    auto [b, e] = spec.layer_range(l);
    EXPECT_GE(b, prev_end);
    EXPECT_LT(b, e);
    prev_end = e;
  }
  EXPECT_LE(prev_end, spec.embedding_ranges()[2].first);
}

// Units 2(L-1-l) and 2(L-1-l)+1 hold exactly block l's MLP half (ln2, mlp.*) and its
// attention half (ln1, attn.*); the first also the final LayerNorm, the last the embeddings;
// and the units tile the whole buffer, padding included.
TEST(GptSpec, BucketUnitsTileTheBufferInBackwardOrder) {
  const GptSpec spec(Model());
  const auto units = spec.bucket_units();
  const int L = Model().n_layers;
  ASSERT_EQ(int(units.size()), 2 * L + 1);
  EXPECT_EQ(spec.embedding_unit(), 2 * L);
  EXPECT_EQ(units.front().second, spec.registry().total_numel());
  EXPECT_EQ(units.back().first, 0u);
  for (size_t u = 1; u < units.size(); ++u) EXPECT_EQ(units[u].second, units[u - 1].first);
  for (const TensorInfo& t : spec.registry().tensors()) {
    int want = 2 * L;  // the embeddings' unit
    if (t.name.rfind("h.", 0) == 0) {
      const int l = std::stoi(t.name.substr(2));
      const bool mlp = t.name.find(".ln2.") != std::string::npos ||
                       t.name.find(".mlp.") != std::string::npos;
      want = 2 * (L - 1 - l) + (mlp ? 0 : 1);
    }
    if (t.name.rfind("lnf", 0) == 0) want = 0;
    const auto [b, e] = units[size_t(want)];
    EXPECT_TRUE(t.offset >= b && t.offset + t.numel <= e) << t.name;
  }
}

using Case = std::tuple<DType, RecomputePolicy>;

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  static const char* const kPolicy[] = {"none", "full", "every_k", "selective"};
  return std::string(dtype_name(std::get<0>(info.param))) + "_" +
         kPolicy[int(std::get<1>(info.param))];
}

class GptSpecRun : public ::testing::TestWithParam<Case> {
 protected:
  static constexpr int B = 2, T = 40;
  GptOptions Options() const { return {std::get<0>(GetParam()), std::get<1>(GetParam()), 2}; }

  // The spec's activations on DEVICE against a counting pass of M: the saved bytes exactly;
  // the peak exactly in fp32 (no backend scratch), at most it in 16 bits (the row blocks'
  // scratch is the backend's).
  void ExpectSpecCountsTheArena(Gpt& m, Device device) const {
    const ActivationBytes act = m.spec().activations(Options(), device, B, T);
    Arena counter = Arena::make_counting();
    m.forward(nullptr, nullptr, B, T, counter);
    EXPECT_EQ(act.saved, double(counter.used_bytes()));
    m.backward(1.0f, counter);
    const double peak = double(m.count_arena_bytes(B, T));
    if (Options().act_dtype == DType::f32)
      EXPECT_EQ(act.peak, peak);
    else
      EXPECT_LE(act.peak, peak);
  }
};

// Saved bytes: the arena in use between forward and backward. Peak: the counting arena's,
// exact in fp32 (no backend scratch); the 16-bit path adds its row blocks' scratch.
TEST_P(GptSpecRun, ActivationsAreWhatTheArenaHolds) {
  Gpt m(Model(), Options());
  ExpectSpecCountsTheArena(m, Device::cpu);
}

// On cuda the arena holds the uploaded inputs and targets and attention's row statistics
// (not the probabilities): the spec on Device::cuda is what a counting pass of the model
// allocates on a device runtime whose backend sizes attention's state as the cuda backend
// does. Exact in fp32, where the CPU ops add no scratch; the cuda backend's own scratch (the
// 16-bit products' fp32 results, attention backward's row sums) is not in the spec.
TEST_P(GptSpecRun, ActivationsOnCudaAreWhatTheArenaHoldsWithCudaStateSizes) {
  DeviceShapedRuntime rt(/*cuda_state=*/true);
  Gpt m(Model(), Options(), rt);
  EXPECT_LT(m.spec().activations(Options(), Device::cuda, B, T).peak,
            m.spec().activations(Options(), Device::cpu, B, T).peak);
  ExpectSpecCountsTheArena(m, Device::cuda);
  EXPECT_TRUE(rt.uploads.empty());  // counting uploads nothing
}

// A real forward and backward with every op timed: calls, FLOPs and bytes per (phase, op)
// are the spec's (the optimizer's update is the trainer's, checked in op_timing_test).
TEST_P(GptSpecRun, StepOpsAreWhatTheTimedBackendRecords) {
  Gpt m(Model(), Options());
  m.init(5);
  Arena arena(m.count_arena_bytes(B, T));
  const Batch batch = MakeBatch(B, T, Model().vocab_size, 7);
  OpProfile measured;
  {
    OpPhaseScope scope(m.op_clock(), &measured, OpPhase::forward, nullptr, 0);
    m.forward(batch.in.data(), batch.tg.data(), B, T, arena);
  }
  {
    OpPhaseScope scope(m.op_clock(), &measured, OpPhase::backward, nullptr, 0);
    m.backward(1.0f, arena);
  }
  const OpProfile spec = m.spec().step_ops(Options(), Device::cpu, B, T, 1);
  for (OpPhase p : {OpPhase::forward, OpPhase::backward})
    for (const auto& [op, op_name] : enum_names(Op{})) {
      const OpStat &want = spec.at(p, op), &got = measured.at(p, op);
      const std::string what = std::string(name(p)) + " " + op_name;
      EXPECT_EQ(got.calls, want.calls) << what;
      EXPECT_NEAR(got.flops, want.flops, 1e-12 * want.flops) << what;
      EXPECT_NEAR(got.bytes, want.bytes, 1e-12 * want.bytes) << what;
    }
  EXPECT_EQ(spec.at(OpPhase::optimizer, Op::optimizer).calls, 1);
}

INSTANTIATE_TEST_SUITE_P(
    AllPolicies, GptSpecRun,
    ::testing::Combine(::testing::Values(DType::f32, DType::bf16),
                       ::testing::Values(RecomputePolicy::none, RecomputePolicy::full,
                                         RecomputePolicy::every_k, RecomputePolicy::selective)),
    CaseName);

}  // namespace
}  // namespace ringstep
