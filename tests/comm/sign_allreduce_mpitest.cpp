// comm/sign_allreduce.h on 2, 3 and 4 ranks: the transport equals the single-process
// simulation of the same math (tests/comm/sign_allreduce_reference.h) bit for bit, in the
// output and in both error buffers, call after call, for counts that need padding and
// counts that do not, short and long; the same bits on 1 and 3 threads; and it sends about
// one bit per element.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/sign_allreduce.h"
#include "comm/sign_allreduce_reference.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"

namespace ringstep {
namespace {

using testing::world;

bool same_bits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

void ExpectMatchesSimulation(size_t count, const std::vector<size_t>& ends, OneBitScale kind,
                             int calls) {
  auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  testing::SignSim sim(n, count, ends);
  std::vector<float> x(count), ew(count, 0.0f), es(count, 0.0f);
  const size_t chunk = sign_chunk_elems(count, n);
  const size_t mine = std::min(count, size_t(r) * chunk);
  const size_t mine_end = std::min(count, mine + chunk);
  for (int c = 0; c < calls; ++c) {
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) sim.x[q][i] = testing::sign_input(q, i, c);
    x = sim.x[r];
    sim.step(kind);
    sign_allreduce(comm, x.data(), count, ends, ew.data(), es.data(), kind);
    ASSERT_TRUE(same_bits(x.data(), sim.x[r].data(), count)) << "output, call " << c;
    ASSERT_TRUE(same_bits(ew.data(), sim.worker_error[r].data(), count)) << "e_w, call " << c;
    ASSERT_TRUE(same_bits(es.data() + mine, sim.server_error[r].data() + mine, mine_end - mine))
        << "e_s, call " << c;
  }
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, x.data(), count * sizeof(float)));
}

TEST(SignAllreduce, MatchesSimulationBitForBit) {
  const size_t q = 8 * size_t(world().size());
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    for (size_t count : {size_t(1), size_t(5), q, 37 * q, 37 * q + 3, size_t(4099)}) {
      SCOPED_TRACE(::testing::Message() << "count " << count << " scale " << name(kind));
      ExpectMatchesSimulation(count, {}, kind, 12);
      // Segments across chunk boundaries, one of a single element, one empty.
      if (count >= 5)
        ExpectMatchesSimulation(count, {count / 3, count / 3 + 1, count / 3 + 1, count}, kind, 12);
      // Scale blocks: many segments, a different number in each chunk's messages.
      if (count >= 5)
        ExpectMatchesSimulation(count, split_segments({count / 3, count}, count, 24), kind, 12);
    }
  }
}

// serve_alone() is exchange()'s server stage: where every rank sends the same message (and
// holds the same server error), it leaves the same server error on this rank's chunk, and
// the same decoded chunk, with no message sent.
TEST(SignAllreduce, ServeAloneIsTheServerStageOfRanksThatAgree) {
  auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  const size_t count = 37 * 8 * size_t(n) + 3;
  const std::vector<size_t> ends = split_segments({count / 3, count}, count, 24);
  const size_t chunk = sign_chunk_elems(count, n);
  const size_t mine = std::min(count, size_t(r) * chunk);
  const size_t mine_end = std::min(count, mine + chunk);
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = testing::sign_input(0, i, 0);
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    SCOPED_TRACE(name(kind));
    std::vector<float> ew(count, 0.0f), es(count), out(count, 0.0f);
    for (size_t i = 0; i < count; ++i) es[i] = 0.25f * testing::sign_input(1, i, 0);
    const std::vector<float> es_before = es;
    SignAllreduce both(count, ends, n, r, kind);
    both.encode(x.data(), ew.data());
    both.exchange(comm, es.data(), 0);
    both.decode(out.data());
    std::vector<float> ew_alone(count, 0.0f), es_alone = es_before, out_alone(count, 0.0f);
    SignAllreduce alone(count, ends, n, r, kind);
    alone.encode(x.data(), ew_alone.data());
    alone.serve_alone(es_alone.data());
    alone.decode(out_alone.data());
    EXPECT_TRUE(same_bits(es.data() + mine, es_alone.data() + mine, mine_end - mine));
    EXPECT_TRUE(same_bits(out.data() + mine, out_alone.data() + mine, mine_end - mine));
    // A stage that did nothing would leave the error as it was.
    EXPECT_FALSE(same_bits(es_alone.data() + mine, es_before.data() + mine, mine_end - mine));
  }
}

// Longer vectors: several scale runs per segment and several groups of segments (one edge
// inside a byte), coded on a team of threads.
TEST(SignAllreduce, LongVectorsMatchSimulationBitForBit) {
  const size_t count = 9 * kScaleRun + 8 * size_t(world().size()) + 5;
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    SCOPED_TRACE(::testing::Message() << "scale " << name(kind));
    ExpectMatchesSimulation(count, {}, kind, 3);
    ExpectMatchesSimulation(
        count, {101, 2 * kScaleRun + 7, 2 * kScaleRun + 8, 5 * kScaleRun + 3, count}, kind, 3);
    ExpectMatchesSimulation(count, split_segments({count / 3, count}, count, 1000), kind, 3);
  }
}

// The worker stage and the decoding split over the calling thread's OpenMP team; 1 and 3
// threads give the same output, error buffers and statistics, bit for bit, call after call.
TEST(SignAllreduce, SameBitsOnAnyNumberOfThreads) {
  auto& comm = world();
  const int saved = omp_get_max_threads();
  const size_t count = 9 * kScaleRun + 8 * size_t(comm.size()) + 5;
  const std::vector<size_t> ends = {101, 2 * kScaleRun + 7, 2 * kScaleRun + 8, 5 * kScaleRun + 3,
                                    count};
  struct Outcome {
    std::vector<float> x, ew, es;
    std::vector<double> sq;
  };
  std::vector<Outcome> runs;
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    Outcome o{std::vector<float>(count),
              std::vector<float>(count, 0.0f),
              std::vector<float>(count, 0.0f),
              {}};
    SignAllreduce call(count, ends, comm.size(), comm.rank(), OneBitScale::mean_abs);
    for (int c = 0; c < 4; ++c) {
      for (size_t i = 0; i < count; ++i) o.x[i] = testing::sign_input(comm.rank(), i, c);
      const SignAllreduceStats st = call.encode(o.x.data(), o.ew.data());
      call.exchange(comm, o.es.data(), kSignAllreduceTag);
      call.decode(o.x.data());
      o.sq.push_back(st.worker_sq_norm);
      o.sq.push_back(st.worker_sq_err);
    }
    runs.push_back(std::move(o));
  }
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(runs[0].x.data(), runs[1].x.data(), count));
  EXPECT_TRUE(same_bits(runs[0].ew.data(), runs[1].ew.data(), count));
  EXPECT_TRUE(same_bits(runs[0].es.data(), runs[1].es.data(), count));
  EXPECT_EQ(runs[0].sq, runs[1].sq);
}

// Two phases of (N - 1) messages of [scale | count / 8N bytes]: 1/32 of an fp32 ring's
// 2 (N - 1) / N x 4 count bytes, plus the scales and padding.
TEST(SignAllreduce, SendsAboutOneBitPerElement) {
  auto& comm = world();
  const int n = comm.size();
  const size_t count = (size_t(1) << 20) + 3;
  std::vector<float> x(count, 1.0f), ew(count, 0.0f), es(count, 0.0f);
  const SignAllreduceStats st =
      sign_allreduce(comm, x.data(), count, {}, ew.data(), es.data(), OneBitScale::mean_abs);
  const double ring_bytes = 2.0 * (n - 1) / n * 4.0 * double(count);
  const size_t block = (4 + sign_chunk_elems(count, n) / 8 + 1) / 2 * 2;
  EXPECT_EQ(st.bytes_sent, 2 * size_t(n - 1) * block);
  EXPECT_EQ(st.bytes_sent, sign_allreduce_bytes(count, {}, n));
  EXPECT_LE(double(st.bytes_sent), ring_bytes / 31.9);
  EXPECT_EQ(x[count - 1], 1.0f);  // all +1 inputs: the code is exact, the mean is 1
}

// One scale per 1024 elements adds 32 bits per 1024 elements per phase, whatever the number
// of ranks (each message carries the scales of its own chunk): 33/32 bits per element.
TEST(SignAllreduce, ScaleBlocksCostTheirScalesAndNoMore) {
  auto& comm = world();
  const int n = comm.size();
  const size_t count = (size_t(1) << 20) + 3, block = 1024;
  const std::vector<size_t> ends = split_segments({}, count, block);
  std::vector<float> x(count, 1.0f), ew(count, 0.0f), es(count, 0.0f);
  const SignAllreduceStats st =
      sign_allreduce(comm, x.data(), count, ends, ew.data(), es.data(), OneBitScale::mean_abs);
  const size_t chunk = sign_chunk_elems(count, n);
  size_t most = 0;  // blocks any one chunk touches
  for (int j = 0; j < n; ++j) {
    const size_t b = std::min(count, size_t(j) * chunk), e = std::min(count, b + chunk);
    if (e > b) most = std::max(most, (e - 1) / block - b / block + 1);
  }
  EXPECT_EQ(st.bytes_sent, 2 * size_t(n - 1) * ((4 * most + chunk / 8 + 1) / 2 * 2));
  const double ring_bytes = 2.0 * (n - 1) / n * 4.0 * double(count);
  EXPECT_LE(double(st.bytes_sent), ring_bytes / 30.9);
  EXPECT_EQ(x[count - 1], 1.0f);
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
