// CommEngine: order, overlap with the caller, spans, and the metadata check.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "comm/engine.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"

namespace ringstep {
namespace {

using testing::Buffer;
using testing::world;

EngineOptions test_options() {
  EngineOptions opts;
  opts.timeout_s = 240;  // a hang here should fail loudly before ctest's 300 s
  return opts;
}

TEST(CommEngine, RunsCollectivesInEnqueueOrder) {
  auto& comm = world();
  const int n = comm.size();
  CommEngine engine(comm, test_options());
  std::vector<int> order;  // written by the engine thread only
  std::vector<Buffer> bufs;
  const int k = 12;
  for (int j = 0; j < k; ++j) bufs.emplace_back(DType::f32, 1000 + 7919 * j);
  std::vector<CommHandle> handles;
  for (int j = 0; j < k; ++j) {
    Buffer& b = bufs[j];
    for (size_t i = 0; i < b.count(); ++i) b.set(i, testing::exact_value(comm.rank(), i + j));
    handles.push_back(engine.enqueue({"allreduce", static_cast<uint64_t>(j), b.count(), DType::f32},
                                     [&order, &b, j](Communicator& c) {
                                       order.push_back(j);
                                       ring_allreduce(c, b.data(), b.count(), DType::f32);
                                     }));
  }
  for (int j = k - 1; j >= 0; --j) engine.wait(handles[j]);  // any order of waiting
  engine.wait_all();
  ASSERT_EQ(order.size(), static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) EXPECT_EQ(order[j], j);
  size_t wrong = 0;
  for (int j = 0; j < k; ++j) {
    for (size_t i = 0; i < bufs[j].count(); ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += testing::exact_value(r, i + j);
      wrong += bufs[j].get(i) != static_cast<float>(sum);
    }
  }
  EXPECT_EQ(wrong, 0u);
  const std::vector<CommSpan> spans = engine.drain_spans();
  ASSERT_EQ(spans.size(), static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(spans[j].tag, static_cast<uint64_t>(j));
    EXPECT_EQ(spans[j].op, "allreduce");
    EXPECT_EQ(spans[j].bytes, bufs[j].bytes());
    EXPECT_LE(spans[j].start_ns, spans[j].end_ns);
    if (j) EXPECT_LE(spans[j - 1].end_ns, spans[j].start_ns);
  }
  EXPECT_TRUE(engine.drain_spans().empty());
}

// The collective progresses while the caller computes and has not called wait().
TEST(CommEngine, CompletesWhileTheCallerComputes) {
  auto& comm = world();
  CommEngine engine(comm, test_options());
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::native}) {
    Buffer grads(DType::f32, 4'000'000);
    for (size_t i = 0; i < grads.count(); ++i) grads.set(i, testing::exact_value(comm.rank(), i));
    CommHandle h = engine.enqueue_allreduce(grads.data(), grads.count(), DType::f32, algo,
                                            /*average=*/false, /*tag=*/1);
    // "Compute" in slices, polling between them, for at most ~60 s.
    volatile double acc = 0;
    bool done_before_wait = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      for (int i = 0; i < 20000; ++i) acc = acc + std::sqrt(static_cast<double>(i));
      if (h.test()) {
        done_before_wait = true;
        break;
      }
    }
    engine.wait(h);
    EXPECT_TRUE(done_before_wait) << name(algo);
    size_t wrong = 0;
    for (size_t i = 0; i < grads.count(); ++i) {
      double sum = 0;
      for (int r = 0; r < comm.size(); ++r) sum += testing::exact_value(r, i);
      wrong += grads.get(i) != static_cast<float>(sum);
    }
    EXPECT_EQ(wrong, 0u) << name(algo);
  }
}

TEST(CommEngine, AverageMatchesAcrossAlgorithms) {
  auto& comm = world();
  CommEngine engine(comm, test_options());
  const size_t count = 123'457;
  Buffer ring(DType::bf16, count), native(DType::bf16, count);
  for (size_t i = 0; i < count; ++i) {
    ring.set(i, testing::exact_value(comm.rank(), i));
    native.set(i, testing::exact_value(comm.rank(), i));
  }
  engine.enqueue_allreduce(ring.data(), count, DType::bf16, AllreduceAlgo::ring, true, 5);
  engine.enqueue_allreduce(native.data(), count, DType::bf16, AllreduceAlgo::native, true, 6);
  engine.wait_all();
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < comm.size(); ++r) sum += testing::exact_value(r, i);
    const float want = testing::rounded(DType::bf16, static_cast<float>(sum / comm.size()));
    wrong += (ring.get(i) != want) + (native.get(i) != want);
  }
  EXPECT_EQ(wrong, 0u);
}

// A mismatched count or dtype is an error on every rank that names the ranks, not a hang.
void expect_mismatch_error(size_t count_on_last, DType dt_on_last, const char* what) {
  auto& comm = world();
  if (comm.size() < 2) GTEST_SKIP();
  const int last = comm.size() - 1;
  CommEngine engine(comm, test_options());
  const bool odd = comm.rank() == last;
  const size_t count = odd ? count_on_last : 1000;
  const DType dt = odd ? dt_on_last : DType::f32;
  Buffer buf(dt, count);
  CommHandle h = engine.enqueue_allreduce(buf.data(), count, dt, AllreduceAlgo::ring, false, 42);
  std::string message;
  try {
    engine.wait(h);
  } catch (const CommError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank(s) " + std::to_string(last)), std::string::npos)
      << what << ": " << message;
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_NE(message.find("tag 42"), std::string::npos) << message;
  // Later collectives fail fast with the same error instead of running out of step.
  EXPECT_THROW(
      engine.wait(engine.enqueue_allreduce(buf.data(), count, dt, AllreduceAlgo::ring, false, 43)),
      CommError);
  EXPECT_THROW(engine.wait_all(), CommError);
}

TEST(CommEngine, MismatchedCountNamesTheRanks) { expect_mismatch_error(1001, DType::f32, "count"); }
TEST(CommEngine, MismatchedDtypeNamesTheRanks) { expect_mismatch_error(1000, DType::f16, "dtype"); }

TEST(CommEngine, RunsWithTheCheckOnEveryCall) {
  auto& comm = world();
  EngineOptions every = test_options();
  every.check_every_call = true;
  for (const EngineOptions& opts : {test_options(), every}) {
    CommEngine engine(comm, opts);
    Buffer buf(DType::f32, 64);
    for (int i = 0; i < 5; ++i)
      engine.enqueue_allreduce(buf.data(), buf.count(), DType::f32, AllreduceAlgo::ring, false, 0);
    engine.wait_all();
    EXPECT_EQ(engine.drain_spans().size(), 5u);
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
