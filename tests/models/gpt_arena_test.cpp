// Gpt::count_arena_bytes sizes the activation arena with a dry forward + backward on a
// counting arena. Pinned here, for every storage dtype and recompute policy:
// - the count is the peak a real forward + backward reaches, to the byte (an arena of that
//   capacity suffices for training micro-batches and evaluate; 64 bytes less does not);
// - the dry run computes nothing: parameters, gradients and later results are unchanged.
// N = 2 x 300 rows: more than one of the 16-bit path's row blocks and product blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/cuda/device.h"
#include "core/error.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

constexpr int B = 2, T = 300;

ModelConfig Model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.seq_len = T;
  m.d_model = 32;
  m.n_layers = 3;
  m.n_heads = 2;
  return m;
}

bool BitEqual(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

using Case = std::tuple<DType, RecomputePolicy>;

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  static const char* const kPolicy[] = {"none", "full", "every_k", "selective"};
  return std::string(dtype_name(std::get<0>(info.param))) + "_" +
         kPolicy[int(std::get<1>(info.param))];
}

class GptArena : public ::testing::TestWithParam<Case> {
 protected:
  Gpt MakeModel() const {
    Gpt m(Model(), GptOptions{std::get<0>(GetParam()), std::get<1>(GetParam()), 2});
    m.init(3);
    return m;
  }
};

TEST_P(GptArena, CountedBytesAreTheRealPeak) {
  Gpt m = MakeModel();
  const size_t counted = m.count_arena_bytes(B, T);
  Arena arena(counted);
  ASSERT_EQ(arena.capacity_bytes(), counted);
  m.grads().zero();
  for (int micro = 0; micro < 2; ++micro) {
    const Batch b = MakeBatch(B, T, Model().vocab_size, 40 + micro);
    m.forward(b.in.data(), b.tg.data(), B, T, arena);
    m.backward(0.5f, arena);
  }
  EXPECT_EQ(arena.peak_bytes(), counted);
  EXPECT_EQ(arena.used_bytes(), 0u);

  const Batch b = MakeBatch(B, T, Model().vocab_size, 50);
  arena.reset_peak();
  m.evaluate(b.in.data(), b.tg.data(), B, T, arena);
  EXPECT_LT(arena.peak_bytes(), counted) << "evaluate keeps no backward buffers";

  Arena short_by_one_line(counted - 64);
  auto train_step = [&] {
    m.forward(b.in.data(), b.tg.data(), B, T, short_by_one_line);
    m.backward(1.0f, short_by_one_line);
  };
  EXPECT_THROW(train_step(), std::length_error);
}

TEST_P(GptArena, CountingComputesNothing) {
  Gpt counted = MakeModel(), plain = MakeModel();
  const Batch b = MakeBatch(B, T, Model().vocab_size, 60);
  for (size_t i = 0; i < counted.grads().size(); ++i) counted.grads().data()[i] = float(i % 7);
  const std::vector<float> grads(counted.grads().data(),
                                 counted.grads().data() + counted.grads().size());
  counted.count_arena_bytes(B, T);
  EXPECT_TRUE(BitEqual(counted.grads().data(), grads.data(), grads.size()));
  EXPECT_TRUE(BitEqual(counted.params().data(), plain.params().data(), grads.size()));

  // A counted model then trains exactly as one that never counted.
  counted.grads().zero();
  plain.grads().zero();
  Arena arena(counted.count_arena_bytes(B, T));
  const float loss_counted = counted.forward(b.in.data(), b.tg.data(), B, T, arena);
  counted.backward(1.0f, arena);
  const float loss_plain = plain.forward(b.in.data(), b.tg.data(), B, T, arena);
  plain.backward(1.0f, arena);
  EXPECT_EQ(loss_counted, loss_plain);
  EXPECT_TRUE(BitEqual(counted.grads().data(), plain.grads().data(), grads.size()));
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndPolicies, GptArena,
    ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                       ::testing::Values(RecomputePolicy::none, RecomputePolicy::full,
                                         RecomputePolicy::every_k, RecomputePolicy::selective)),
    CaseName);

TEST(GptArenaCount, IsAnErrorBetweenForwardAndBackward) {
  Gpt m(Model());
  m.init(1);
  const Batch b = MakeBatch(B, T, Model().vocab_size, 1);
  Arena arena(m.count_arena_bytes(B, T));
  m.forward(b.in.data(), b.tg.data(), B, T, arena);
  EXPECT_THROW(m.count_arena_bytes(B, T), std::logic_error);
  m.backward(1.0f, arena);
  EXPECT_EQ(m.count_arena_bytes(B, T), arena.peak_bytes());
}

TEST(GptArenaCount, CudaIsAnInputErrorWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here: tests/models/gpt_cuda_cudatest.cpp";
  EXPECT_THROW(Gpt(Model(), {}, Device::cuda), InputError);
}

}  // namespace
}  // namespace ringstep
