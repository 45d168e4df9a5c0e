// Data parallelism end to end over the real comm engine: W ranks x micro_batch B give the
// gradients and losses of 1 rank x W*B, and overlapping the reduction with backward changes
// nothing, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "models/gpt.h"
#include "mpi/mpitest_main.h"
#include "optim/adamw.h"
#include "train/grad_sync.h"

namespace ringstep {
namespace {

using ringstep::testing::world;

ModelConfig Model() { return {37, 8, 16, 2, 2}; }

// The global batch of step S, identical on every rank: W*B sequences of T tokens.
void GlobalBatch(int step, int sequences, int T, int V, std::vector<int32_t>& in,
                 std::vector<int32_t>& tg) {
  std::mt19937 gen(1000 + step);
  in.resize(size_t(sequences) * T);
  tg.resize(size_t(sequences) * T);
  for (auto& x : in) x = int32_t(gen() % V);
  for (auto& x : tg) x = int32_t(gen() % V);
}

double RelativeError(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += std::pow(double(a[i]) - b[i], 2);
    den += std::pow(double(b[i]), 2);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Trains STEPS steps; each rank takes its B-row slice of the global batch (or, with
// LOCAL_ONLY, the whole global batch with no communication: the one-rank reference).
std::vector<float> Train(Gpt& m, AdamW& opt, GradSync* sync, int steps, int B, bool local_only,
                         std::vector<std::vector<float>>* grads_per_step = nullptr) {
  const int W = world().size(), r = world().rank(), T = m.config().seq_len;
  const int rows = local_only ? W * B : B;
  Arena arena(m.count_arena_bytes(rows, T));
  std::vector<int32_t> in, tg;
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    GlobalBatch(s, W * B, T, m.config().vocab_size, in, tg);
    const size_t off = local_only ? 0 : size_t(r) * B * T;
    m.grads().zero();
    float loss = m.forward(in.data() + off, tg.data() + off, rows, T, arena);
    m.backward(1.0f, arena, sync ? sync->unit_hook() : nullptr);
    if (sync) {
      sync->finish();
      PhaseTimes pt;
      loss = sync->agree(loss, pt).mean_loss;
    }
    if (grads_per_step)
      grads_per_step->emplace_back(m.grads().data(), m.grads().data() + m.grads().size());
    losses.push_back(loss);
    opt.step(m.params().data(), m.grads().data(), 1e-2, 1.0);
  }
  return losses;
}

TEST(DataParallel, RanksTimesBatchMatchesOneRankWithWholeBatch) {
  const int B = 2, steps = 5;
  Gpt ref(Model()), dp(Model());
  ref.init(3);
  dp.init(3);
  AdamW ref_opt(ref.registry(), {0.9, 0.95, 1e-8, 0.1});
  AdamW dp_opt(dp.registry(), {0.9, 0.95, 1e-8, 0.1});
  CommConfig cc;
  cc.bucket_mb = 0.01;  // several buckets
  GradSync sync(&world(), cc);
  sync.setup(dp);
  ASSERT_GT(sync.buckets().size(), 2u);
  std::vector<std::vector<float>> ref_grads, dp_grads;
  std::vector<float> ref_loss = Train(ref, ref_opt, nullptr, steps, B, true, &ref_grads);
  std::vector<float> dp_loss = Train(dp, dp_opt, &sync, steps, B, false, &dp_grads);
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(dp_loss[s], ref_loss[s], 1e-5 * std::fabs(ref_loss[s])) << "step " << s;
    EXPECT_LE(RelativeError(dp_grads[s].data(), ref_grads[s].data(), ref_grads[s].size()), 1e-5)
        << "step " << s;
  }
}

TEST(DataParallel, OverlapOnAndOffGiveIdenticalParameters) {
  std::vector<std::vector<float>> params;
  for (bool overlap : {true, false}) {
    Gpt m(Model());
    m.init(9);
    AdamW opt(m.registry(), {0.9, 0.95, 1e-8, 0.1});
    CommConfig cc;
    cc.bucket_mb = 0.005;
    cc.overlap = overlap;
    GradSync sync(&world(), cc);
    sync.setup(m);
    Train(m, opt, &sync, 10, 2, false);
    params.emplace_back(m.params().data(), m.params().data() + m.params().size());
  }
  ASSERT_EQ(params[0].size(), params[1].size());
  EXPECT_EQ(0, std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)));
}

TEST(DataParallel, BucketsCoverTheBufferOnceInBackwardOrder) {
  Gpt m(Model());
  for (double mb : {0.001, 0.02, 25.0}) {
    CommConfig cc;
    cc.bucket_mb = mb;
    GradSync sync(&world(), cc);
    sync.setup(m);
    size_t covered = 0, prev_begin = m.registry().total_numel();
    for (const Bucket& b : sync.buckets()) {
      EXPECT_EQ(b.end, prev_begin);  // each bucket sits just below the previous one
      prev_begin = b.begin;
      covered += b.end - b.begin;
    }
    EXPECT_EQ(prev_begin, 0u);
    EXPECT_EQ(covered, m.registry().total_numel());
  }
}

TEST(DataParallel, DivergedReplicaIsNamed) {
  Gpt m(Model());
  m.init(1);
  GradSync sync(&world(), CommConfig{});
  sync.setup(m);
  sync.check_replicas(m.params(), 0);  // identical: fine
  if (world().rank() == world().size() - 1) m.params().data()[5] += 1.0f;
  try {
    sync.check_replicas(m.params(), 7);
    FAIL() << "expected a divergence error";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) " + std::to_string(world().size() - 1)),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallel, StragglerIsNamedAfterThreeSlowSteps) {
  // Every rank's step is 100 ms (they wait for each other); the last rank is busy 80 ms of
  // it while the others are busy 50 ms and wait 50 ms: it is the straggler.
  GradSync sync(&world(), CommConfig{});
  const int last = world().size() - 1;
  for (int step = 1; step <= 3; ++step) {
    PhaseTimes pt;
    pt.step = 100;
    pt.comm_exposed = world().rank() == last ? 20 : 50;
    GradSync::StepView v = sync.agree(1.0f, pt);
    EXPECT_EQ(v.ranks.straggler, step < 3 ? -1 : last) << "step " << step;
    if (step == 3) EXPECT_NEAR(v.straggler_ratio, 80.0 / 50.0, 1e-12);
  }
  PhaseTimes even;
  even.step = 100;
  even.comm_exposed = 50;
  EXPECT_EQ(sync.agree(1.0f, even).ranks.straggler, -1);  // one even step ends the streak
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
