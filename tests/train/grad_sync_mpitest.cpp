// The gradient sync's agreements as an optimizer sees them (optim/reducer.h), on 2, 3 and 4
// ranks: any_rank is a MAX of flags, average an exact mean; and the loss scaler through it:
// an inf or NaN in one rank's gradient makes every rank skip the step, with parameters,
// AdamW moments and step count untouched bit for bit. Gradients staged through host memory
// (a GPU's) are reduced bucket by bucket as backward finishes them, to the exact mean.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/sign_allreduce.h"
#include "comm/sign_allreduce_reference.h"  // sign_input
#include "core/host_backed_runtime.h"
#include "core/runtime.h"
#include "models/gpt.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/reducer.h"
#include "train/grad_sync.h"

namespace ringstep {
namespace {

using testing::world;

// Every rank holds the same parameters and an AdamW that has taken two steps; gradients
// are built per rank and averaged by the Reducer, and the skip flag agreed through it.
class ScalerReplica {
 public:
  explicit ScalerReplica(Reducer& reducer)
      : reducer_(reducer),
        reg_(registry()),
        opt_(reg_, AdamWParams{0.9, 0.95, 1e-8, 0.1}),
        scaler_(fp16()),
        params_(reg_.total_numel()) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i] = testing::exact_value(0, i);
    for (int s = 0; s < 2; ++s) EXPECT_TRUE(step(-1, 0.0f));
  }

  // One optimizer step through the scaler. Rank INJECT_RANK writes BAD into its reduced
  // gradient (-1: nobody). Returns whether the step was applied.
  bool step(int inject_rank, float bad) {
    auto& comm = world();
    std::vector<float> g(reg_.total_numel());
    const auto s = static_cast<float>(scaler_.scale());  // backward of loss * S
    for (size_t i = 0; i < g.size(); ++i) g[i] = testing::exact_value(comm.rank(), i) * s;
    reducer_.average(g.data(), g.size());
    if (comm.rank() == inject_rank) g[g.size() / 3] = bad;
    const bool found = reducer_.any_rank(scaler_.unscale_and_check(g.data(), g.size()));
    if (!scaler_.update(found)) return false;
    opt_.step(params_.data(), g.data(), 1e-2, 1.0);
    return true;
  }

  // Parameters, both moments and the step count, as bytes.
  std::vector<std::byte> snapshot() {
    std::vector<std::byte> out;
    for (const float* buf : {params_.data(), opt_.m().data(), opt_.v().data()}) {
      const auto* b = reinterpret_cast<const std::byte*>(buf);
      out.insert(out.end(), b, b + reg_.total_numel() * sizeof(float));
    }
    const int64_t t = opt_.step_count();
    const auto* b = reinterpret_cast<const std::byte*>(&t);
    out.insert(out.end(), b, b + sizeof t);
    return out;
  }

  const LossScaler& scaler() const { return scaler_; }
  const AdamW& opt() const { return opt_; }

 private:
  static Registry registry() {
    Registry reg;
    reg.add("w", {37, 5}, true);  // not a multiple of the vector width
    reg.add("b", {5}, false);
    return reg;
  }
  static PrecisionConfig fp16() {
    PrecisionConfig p;
    p.dtype = DType::f16;  // auto: dynamic, initial 65536, hysteresis 1
    return p;
  }

  Reducer& reducer_;
  Registry reg_;
  AdamW opt_;
  LossScaler scaler_;
  std::vector<float> params_;
};

void expect_every_rank_skips(float bad, const char* what) {
  auto& comm = world();
  GradSync sync(&comm, CommConfig{});
  ScalerReplica r(sync);
  ASSERT_EQ(r.opt().step_count(), 2);
  const double scale = r.scaler().scale();
  const std::vector<std::byte> before = r.snapshot();
  EXPECT_FALSE(r.step(comm.size() - 1, bad)) << what;
  EXPECT_EQ(r.scaler().scale(), scale / 2) << what;
  EXPECT_EQ(r.scaler().state().consecutive_skips, 1) << what;
  EXPECT_EQ(r.scaler().state().skipped_total, 1) << what;
  EXPECT_EQ(r.opt().step_count(), 2) << what;
  const std::vector<std::byte> after = r.snapshot();
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(std::memcmp(after.data(), before.data(), before.size()), 0) << what;

  // The next clean step applies everywhere, at the halved scale, and the replicas agree.
  EXPECT_TRUE(r.step(-1, 0.0f)) << what;
  EXPECT_EQ(r.opt().step_count(), 3) << what;
  EXPECT_EQ(r.scaler().state().consecutive_skips, 0) << what;
  const std::vector<std::byte> stepped = r.snapshot();
  EXPECT_NE(std::memcmp(stepped.data(), before.data(), before.size()), 0) << what;
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, stepped.data(), stepped.size())) << what;
}

TEST(GradSyncMpi, InfOnLastRankSkipsOnEveryRank) {
  expect_every_rank_skips(std::numeric_limits<float>::infinity(), "inf");
}

TEST(GradSyncMpi, NanOnLastRankSkipsOnEveryRank) {
  expect_every_rank_skips(std::numeric_limits<float>::quiet_NaN(), "nan");
}

TEST(GradSyncMpi, AnyRankIsTrueWhenAnyOneRankFound) {
  auto& comm = world();
  GradSync sync(&comm, CommConfig{});
  Reducer& reducer = sync;
  EXPECT_EQ(reducer.world(), comm.size());
  EXPECT_FALSE(reducer.any_rank(false));
  EXPECT_TRUE(reducer.any_rank(true));
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_TRUE(reducer.any_rank(comm.rank() == r)) << "found on rank " << r;
    EXPECT_TRUE(reducer.any_rank(comm.rank() != r)) << "found on all but rank " << r;
  }
}

// Exactly summable inputs: the mean is the float sum divided once by the world size, by
// both algorithms, on the recursive-doubling (7) and ring (100'003) paths alike.
// Who saw a fault first: the lowest flagged rank on every rank, -1 when none.
TEST(GradSyncMpi, FirstRankIsTheLowestFlaggedRank) {
  auto& comm = world();
  GradSync sync(&comm, CommConfig{});
  EXPECT_EQ(sync.first_rank(false), -1);
  for (int k = 0; k < comm.size(); ++k) {
    EXPECT_EQ(sync.first_rank(comm.rank() >= k), k) << "flagged from rank " << k;
    EXPECT_EQ(sync.first_rank(comm.rank() == k), k) << "flagged on rank " << k;
  }
}

TEST(GradSyncMpi, AverageIsTheExactMean) {
  auto& comm = world();
  const int n = comm.size();
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::native}) {
    CommConfig cfg;
    cfg.allreduce = algo;
    GradSync sync(&comm, cfg);
    for (size_t count : {size_t{7}, size_t{100'003}}) {
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = testing::exact_value(comm.rank(), i);
      static_cast<Reducer&>(sync).average(buf.data(), count);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += testing::exact_value(r, i);
        wrong += buf[i] != sum / static_cast<float>(n);
      }
      EXPECT_EQ(wrong, 0u) << name(algo) << " count " << count;
      EXPECT_TRUE(testing::identical_on_all_ranks(comm, buf.data(), count * sizeof(float)));
    }
  }
}

// sign_average's pipeline is sign_allreduce per bucket: over three calls (the error buffers
// carry over), the output and both error buffers match one sign_allreduce per bucket bit for
// bit. PREPARE supplies each part's input (so a part read before it is prepared would read
// NaN), and FINISH sees the part's final mean already in place; the parts are the buckets.
TEST(GradSyncMpi, SignAverageIsSignAllreducePerBucket) {
  auto& comm = world();
  Gpt model(ModelConfig{37, 8, 16, 2, 2});
  CommConfig cfg;
  cfg.bucket_mb = 0.005;  // several buckets
  GradSync sync(&comm, cfg);
  sync.setup(model);
  const size_t n = model.registry().total_numel();
  ASSERT_GT(sync.buckets().size(), 2u);
  std::vector<float> buf(n), ew(n, 0.0f), es(n, 0.0f), ref(n), ref_ew(n, 0.0f), ref_es(n, 0.0f);
  for (int call = 0; call < 3; ++call) {
    std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
    std::vector<std::pair<size_t, size_t>> prepared, finished;
    std::vector<float> seen(n, std::numeric_limits<float>::quiet_NaN());
    auto prepare = [&](size_t b, size_t e) {
      prepared.emplace_back(b, e);
      for (size_t i = b; i < e; ++i) buf[i] = testing::sign_input(comm.rank(), i, call);
    };
    auto finish = [&](size_t b, size_t e) {
      finished.emplace_back(b, e);
      std::copy(buf.begin() + b, buf.begin() + e, seen.begin() + b);
    };
    static_cast<Reducer&>(sync).sign_average(buf.data(), ew.data(), es.data(), n, SignCode{},
                                             prepare, finish);
    for (size_t i = 0; i < n; ++i) ref[i] = testing::sign_input(comm.rank(), i, call);
    for (const Bucket& k : sync.buckets()) {
      const size_t len = k.end - k.begin;
      sign_allreduce(comm, ref.data() + k.begin, len, k.tensor_ends, ref_ew.data() + k.begin,
                     ref_es.data() + k.begin, OneBitScale::mean_abs);
    }
    ASSERT_EQ(prepared.size(), sync.buckets().size());
    EXPECT_EQ(prepared, finished);
    size_t covered = 0;
    for (auto [b, e] : prepared) covered += e - b;
    EXPECT_EQ(covered, n);
    EXPECT_EQ(std::memcmp(buf.data(), ref.data(), n * sizeof(float)), 0) << "call " << call;
    EXPECT_EQ(std::memcmp(seen.data(), ref.data(), n * sizeof(float)), 0) << "call " << call;
    EXPECT_EQ(std::memcmp(ew.data(), ref_ew.data(), n * sizeof(float)), 0) << "call " << call;
    EXPECT_EQ(std::memcmp(es.data(), ref_es.data(), n * sizeof(float)), 0) << "call " << call;
  }
  (void)sync.take_exchange();
}

// Host memory that GradSync must treat as a device's (host_memory() false), whose
// asynchronous copies happen only when waited for: a bucket reduced before its copy out was
// waited for would be reduced from stale staging memory, one copied back before its copy in
// was waited for would be lost. Counts the copies and pins.
class StagedRuntime final : public testing::HostBackedRuntime {
 public:
  StagedRuntime() : HostBackedRuntime("staged test memory") {}
  void copy(void* dst, const void* src, size_t bytes) override {
    ++whole_copies;
    HostBackedRuntime::copy(dst, src, bytes);
  }

  std::shared_ptr<CopyInFlight> copy_to_host_async(void* host, const void* src,
                                                   size_t bytes) override {
    return deferred(host, src, bytes, out_bytes);
  }
  std::shared_ptr<CopyInFlight> copy_to_device_async(void* dst, const void* host,
                                                     size_t bytes) override {
    return deferred(dst, host, bytes, in_bytes);
  }
  void pin_host(void*, size_t) override { ++pins; }
  void unpin_host(void*) noexcept override { --pins; }

  std::mutex mu;
  std::vector<size_t> out_bytes, in_bytes;  // each copy's size, in the order queued
  int pins = 0, whole_copies = 0;

 private:
  struct Deferred final : CopyInFlight {
    void* dst;
    const void* src;
    size_t bytes;
    std::once_flag once;
    Deferred(void* d, const void* s, size_t n) : dst(d), src(s), bytes(n) {}
    void wait() override { std::call_once(once, [&] { std::memcpy(dst, src, bytes); }); }
  };
  std::shared_ptr<CopyInFlight> deferred(void* dst, const void* src, size_t bytes,
                                         std::vector<size_t>& log) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back(bytes);
    return std::make_shared<Deferred>(dst, src, bytes);
  }
};

// Staged gradients with overlap: each bucket but the embeddings' leaves the "device" when
// backward finishes its last unit, in backward order, before finish() is called; finish()
// stages the rest. Every bucket is copied out and back once, no whole-buffer copy, and the
// result is the exact mean of integer-valued gradients. Without overlap, the same result,
// every bucket staged by finish().
TEST(GradSyncMpi, StagedBucketsLeaveAsBackwardFinishesThemAndAverageExactly) {
  auto& comm = world();
  const GptSpec spec(ModelConfig{37, 8, 16, 3, 2});
  const size_t n = spec.registry().total_numel();
  const int W = comm.size();
  for (bool overlap : {true, false}) {
    StagedRuntime rt;
    {
      FlatBuffer grads(n, rt);
      for (size_t i = 0; i < n; ++i) grads.data()[i] = float((comm.rank() + 1) * int(i % 7));
      CommConfig cfg;
      cfg.bucket_mb = 0.004;  // several buckets
      cfg.overlap = overlap;
      GradSync sync(&comm, cfg);
      sync.setup(grads, spec);
      EXPECT_EQ(rt.pins, W > 1 ? 1 : 0);
      const std::vector<Bucket>& buckets = sync.buckets();
      ASSERT_GT(buckets.size(), 2u);
      const std::function<void(int)> hook = sync.unit_hook();
      ASSERT_EQ(bool(hook), overlap && W > 1);
      size_t out_before_finish = 0;
      if (hook) {
        for (int unit = 0; unit < spec.embedding_unit(); ++unit) hook(unit);
        out_before_finish = rt.out_bytes.size();
        hook(spec.embedding_unit());  // the embeddings' bucket is finish()'s
        EXPECT_EQ(rt.out_bytes.size(), out_before_finish);
      }
      size_t block_buckets = 0;
      for (const Bucket& k : buckets) block_buckets += k.last_unit < spec.embedding_unit() ? 1 : 0;
      EXPECT_EQ(out_before_finish, hook ? block_buckets : 0);
      sync.finish();
      if (W > 1) {
        ASSERT_EQ(rt.out_bytes.size(), buckets.size());
        ASSERT_EQ(rt.in_bytes.size(), buckets.size());
        for (size_t b = 0; b < buckets.size(); ++b) {
          const size_t bytes = (buckets[b].end - buckets[b].begin) * sizeof(float);
          EXPECT_EQ(rt.out_bytes[b], bytes) << b;
          EXPECT_EQ(rt.in_bytes[b], bytes) << b;
        }
      }
      EXPECT_EQ(rt.whole_copies, 0);
      // The mean of (r + 1) x (i mod 7) over the ranks: (W + 1) / 2 x (i mod 7), exact.
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i)
        wrong += grads.data()[i] != float(W + 1) / 2 * float(i % 7) ? 1 : 0;
      EXPECT_EQ(wrong, 0u) << "overlap " << overlap;
    }
    EXPECT_EQ(rt.pins, 0);  // unpinned with the GradSync
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
