// A whole Gpt step on cuda against the same step on the CPU: same init, same batch; the
// loss and every gradient within 1e-5 (fp32) or 1e-2 (bf16, fp16) relative; the arena count is
// exact on the device too, and a full recompute reproduces the forward's loss bit for bit.
// Skips with the reason when no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/cuda/device.h"
#include "core/cuda/cuda_skip.h"
#include "core/registry.h"
#include "models/gpt.h"
#include "models/gpt_test_batch.h"

namespace ringstep {
namespace {

constexpr int B = 2, T = 37;

ModelConfig Model() {
  ModelConfig m;
  m.vocab_size = 101;
  m.seq_len = T;
  m.d_model = 48;
  m.n_layers = 2;
  m.n_heads = 3;
  return m;
}

struct StepResult {
  float loss = 0;
  std::vector<float> grads;
};

StepResult Step(Device device, DType dt, RecomputePolicy policy) {
  GptOptions opt;
  opt.act_dtype = dt;
  opt.recompute = policy;
  Gpt m(Model(), opt, device);
  m.init(7);
  const Batch b = MakeBatch(B, T, Model().vocab_size, 3);
  const size_t bytes = m.count_arena_bytes(B, T);
  Arena arena(bytes, device);
  StepResult r;
  r.loss = m.forward(b.in.data(), b.tg.data(), B, T, arena);
  m.backward(1.0f, arena);
  EXPECT_EQ(arena.peak_bytes(), bytes) << "count_arena_bytes is exact on " << name(device);
  FlatBuffer host(m.grads().size());
  copy_buffer(host, m.grads());
  r.grads.assign(host.data(), host.data() + host.size());
  return r;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

class GptCuda : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (const std::string why = ringstep::testing::cuda_skip_reason(); !why.empty())
      GTEST_SKIP() << why;
  }
};

TEST_P(GptCuda, StepMatchesCpu) {
  const DType dt = GetParam();
  const double tol = dt == DType::f32 ? 1e-5 : 1e-2;
  const StepResult cpu = Step(Device::cpu, dt, RecomputePolicy::none);
  const StepResult gpu = Step(Device::cuda, dt, RecomputePolicy::none);
  EXPECT_NEAR(gpu.loss, cpu.loss, tol * std::fabs(cpu.loss));
  EXPECT_LE(RelErr(gpu.grads, cpu.grads), tol);
}

// A full recompute reruns the block's forward, the fused MLP product + GELU included: the
// same loss bit for bit. A selective one rebuilds the GELU output from the kept input with
// gelu_forward alone, so its blocks run the two ops in forward too (models/gpt.cpp): its
// loss differs from policy none's by how cuBLASLt's GELU epilogue rounds (of the fp32 sum,
// not the stored input), within the tolerance against the CPU.
TEST_P(GptCuda, RecomputeGivesTheSameLossAndGradients) {
  const DType dt = GetParam();
  const double tol = dt == DType::f32 ? 1e-5 : 1e-2;
  const StepResult none = Step(Device::cuda, dt, RecomputePolicy::none);
  const StepResult full = Step(Device::cuda, dt, RecomputePolicy::full);
  EXPECT_EQ(full.loss, none.loss);
  // Gradients add with atomics on the GPU: equal up to summation order.
  EXPECT_LE(RelErr(full.grads, none.grads), 1e-6);
  const StepResult selective = Step(Device::cuda, dt, RecomputePolicy::selective);
  EXPECT_NEAR(selective.loss, none.loss, tol * std::fabs(none.loss));
  EXPECT_LE(RelErr(selective.grads, none.grads), tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptCuda, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
}  // namespace ringstep
