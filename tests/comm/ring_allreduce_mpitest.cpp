// ringstep's ring AllReduce (and its halves) against exact references, on 2, 3 and 4 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include "comm/link.h"
#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"

namespace ringstep {
namespace {

using testing::Buffer;
using testing::world;

constexpr size_t kRanksMinusOne = std::numeric_limits<size_t>::max();  // resolved per run
constexpr size_t kManySubChunks = std::numeric_limits<size_t>::max() - 1;

enum class Path { ring, recursive_doubling, defaults };

struct Params {
  DType dt;
  size_t count;
  Path path;
};

RingOptions options_for(Path path, size_t count) {
  RingOptions opt;
  if (path == Path::ring) opt.small_bytes = 0;
  if (path == Path::recursive_doubling) opt.small_bytes = std::numeric_limits<size_t>::max();
  if (count == kManySubChunks) opt.chunk_bytes = 1024;
  return opt;
}

size_t resolve(size_t count, int n) {
  if (count == kRanksMinusOne) return static_cast<size_t>(n - 1);
  if (count == kManySubChunks) return 100'003;  // ~50-200 sub-chunks of 1 KiB per segment
  return count;
}

// Fills buf with this rank's wavy inputs and returns, per element, the exact sum (double)
// of every rank's stored inputs and the sum of their magnitudes.
void fill_wavy(Buffer& buf, int rank, int n, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(buf.count(), 0.0);
  mag.assign(buf.count(), 0.0);
  for (size_t i = 0; i < buf.count(); ++i) {
    buf.set(i, testing::wavy_value(rank, i));
    for (int r = 0; r < n; ++r) {
      const double v = testing::rounded(buf.dtype(), testing::wavy_value(r, i));
      ref[i] += v;
      mag[i] += std::fabs(v);
    }
  }
}

// Elements outside |got - ref/divisor| <= (n+1) u sum|x| (n-1 rounded hops, one final).
size_t count_off(const Buffer& got, const std::vector<double>& ref, const std::vector<double>& mag,
                 int n, double divisor, size_t begin, size_t end) {
  const double u = testing::unit_roundoff(got.dtype());
  size_t off = 0;
  for (size_t i = begin; i < end; ++i) {
    const double tol = (n + 1) * u * mag[i] / divisor + 1e-30;
    if (!(std::fabs(got.get(i) - ref[i] / divisor) <= tol)) {
      if (off < 3)
        ADD_FAILURE() << "element " << i << ": got " << got.get(i) << ", want " << ref[i] / divisor
                      << " (tol " << tol << ")";
      ++off;
    }
  }
  return off;
}

class RingAllreduceCase : public ::testing::TestWithParam<Params> {};

TEST_P(RingAllreduceCase, MatchesReferenceSum) {
  const auto [dt, count_param, path] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const size_t count = resolve(count_param, n);
  Buffer buf(dt, count);
  std::vector<double> ref, mag;
  fill_wavy(buf, comm.rank(), n, ref, mag);
  ring_allreduce(comm, buf.data(), count, dt, options_for(path, count_param));
  EXPECT_EQ(count_off(buf, ref, mag, n, 1.0, 0, count), 0u);
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, buf.data(), buf.bytes()));
}

TEST_P(RingAllreduceCase, AverageDividesByWorldSize) {
  const auto [dt, count_param, path] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const size_t count = resolve(count_param, n);
  Buffer buf(dt, count);
  std::vector<double> ref, mag;
  fill_wavy(buf, comm.rank(), n, ref, mag);
  RingOptions opt = options_for(path, count_param);
  opt.average = true;
  ring_allreduce(comm, buf.data(), count, dt, opt);
  EXPECT_EQ(count_off(buf, ref, mag, n, n, 0, count), 0u);
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, buf.data(), buf.bytes()));
}

// max and min round nothing: every rank ends with the exact extreme, ties broken alike.
TEST_P(RingAllreduceCase, MaxAndMinAreExact) {
  const auto [dt, count_param, path] = GetParam();
  auto& comm = world();
  const size_t count = resolve(count_param, comm.size());
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    Buffer buf(dt, count), expected(dt, count);
    testing::fill_extreme(buf, expected, comm.rank(), comm.size(), op);
    RingOptions opt = options_for(path, count_param);
    opt.op = op;
    ring_allreduce(comm, buf.data(), count, dt, opt);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += !buf.same_bits(expected, i);
    EXPECT_EQ(wrong, 0u) << reduce_op_name(op);
    EXPECT_TRUE(testing::identical_on_all_ranks(comm, buf.data(), buf.bytes()));
  }
}

std::string case_name(const ::testing::TestParamInfo<Params>& info) {
  const Params& p = info.param;
  const std::string count = p.count == kRanksMinusOne   ? "RanksMinusOne"
                            : p.count == kManySubChunks ? "ManySubChunks"
                                                        : std::to_string(p.count);
  const char* path = p.path == Path::ring ? "ring" : p.path == Path::defaults ? "default" : "rd";
  return std::string(dtype_name(p.dt)) + "_" + count + "_" + path;
}

std::vector<Params> all_cases() {
  std::vector<Params> cases;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{7}, kRanksMinusOne, size_t{1'000'003}, kManySubChunks})
      for (Path path : {Path::ring, Path::recursive_doubling, Path::defaults})
        cases.push_back({dt, count, path});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Counts, RingAllreduceCase, ::testing::ValuesIn(all_cases()), case_name);

// Exactly summable inputs: ring, recursive doubling and MPI_Allreduce agree bit for bit.
TEST(RingAllreduce, ExactInputsMatchNativeBitwise) {
  auto& comm = world();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (size_t count : {size_t{7}, size_t{5000}, size_t{1'000'003}}) {
      Buffer ring(dt, count), native(dt, count), expected(dt, count);
      for (size_t i = 0; i < count; ++i) {
        ring.set(i, testing::exact_value(comm.rank(), i));
        native.set(i, testing::exact_value(comm.rank(), i));
        double sum = 0;
        for (int r = 0; r < comm.size(); ++r) sum += testing::exact_value(r, i);
        expected.set(i, static_cast<float>(sum));
      }
      ring_allreduce(comm, ring.data(), count, dt);
      allreduce(comm, AllreduceAlgo::native, native.data(), count, dt);
      size_t wrong = 0, differ = 0;
      for (size_t i = 0; i < count; ++i) {
        wrong += !ring.same_bits(expected, i);
        differ += !ring.same_bits(native, i);
      }
      EXPECT_EQ(wrong, 0u) << dtype_name(dt) << " count " << count;
      EXPECT_EQ(differ, 0u) << dtype_name(dt) << " count " << count;
    }
  }
}

// Pipelining extremes: one element per sub-chunk, one sub-chunk in flight, a deep window.
TEST(RingAllreduce, WindowAndSubChunkExtremes) {
  auto& comm = world();
  const int n = comm.size();
  for (auto [chunk, window] : {std::pair<size_t, int>{4, 1}, {4, 4}, {1000, 1}, {4096, 8}}) {
    RingOptions opt;
    opt.small_bytes = 0;
    opt.chunk_bytes = chunk;
    opt.window = window;
    Buffer buf(DType::f32, 3001);
    std::vector<double> ref, mag;
    fill_wavy(buf, comm.rank(), n, ref, mag);
    ring_allreduce(comm, buf.data(), buf.count(), DType::f32, opt);
    EXPECT_EQ(count_off(buf, ref, mag, n, 1.0, 0, buf.count()), 0u)
        << "chunk " << chunk << " window " << window;
    EXPECT_TRUE(testing::identical_on_all_ranks(comm, buf.data(), buf.bytes()));
  }
}

TEST(RingReduceScatter, OwnShardHoldsTheSum) {
  auto& comm = world();
  const int n = comm.size();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (size_t count :
         {size_t{1}, size_t{static_cast<size_t>(n) - 1}, size_t{10'007}, size_t{1'000'003}}) {
      for (bool average : {false, true}) {
        Buffer buf(dt, count);
        std::vector<double> ref, mag;
        fill_wavy(buf, comm.rank(), n, ref, mag);
        RingOptions opt;
        opt.average = average;
        ring_reduce_scatter(comm, buf.data(), count, dt, opt);
        const Shard mine = shard_of(count, n, comm.rank());
        EXPECT_EQ(
            count_off(buf, ref, mag, n, average ? n : 1.0, mine.offset, mine.offset + mine.count),
            0u)
            << dtype_name(dt) << " count " << count;
      }
    }
  }
}

TEST(RingReduceScatter, MatchesNativeOnExactInputs) {
  auto& comm = world();
  const size_t count = 100'003;
  for (DType dt : {DType::f32, DType::bf16}) {
    Buffer ring(dt, count), native(dt, count);
    for (size_t i = 0; i < count; ++i) {
      ring.set(i, testing::exact_value(comm.rank(), i));
      native.set(i, testing::exact_value(comm.rank(), i));
    }
    ring_reduce_scatter(comm, ring.data(), count, dt);
    comm.reduce_scatter(native.data(), count, dt, ReduceOp::sum);
    const Shard mine = shard_of(count, comm.size(), comm.rank());
    size_t differ = 0;
    for (size_t i = mine.offset; i < mine.offset + mine.count; ++i)
      differ += !ring.same_bits(native, i);
    EXPECT_EQ(differ, 0u) << dtype_name(dt);
  }
}

TEST(RingReduceScatter, MaxAndMinOwnShardIsExact) {
  auto& comm = world();
  const size_t count = 100'003;
  for (DType dt : {DType::f32, DType::bf16})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      Buffer buf(dt, count), expected(dt, count);
      testing::fill_extreme(buf, expected, comm.rank(), comm.size(), op);
      RingOptions opt;
      opt.op = op;
      ring_reduce_scatter(comm, buf.data(), count, dt, opt);
      const Shard mine = shard_of(count, comm.size(), comm.rank());
      size_t wrong = 0;
      for (size_t i = mine.offset; i < mine.offset + mine.count; ++i)
        wrong += !buf.same_bits(expected, i);
      EXPECT_EQ(wrong, 0u) << dtype_name(dt) << " " << reduce_op_name(op);
    }
}

TEST(RingAllreduce, AverageNeedsASum) {
  auto& comm = world();
  float x = 1;
  RingOptions opt;
  opt.op = ReduceOp::max;
  opt.average = true;
  EXPECT_THROW(ring_allreduce(comm, &x, 1, DType::f32, opt), std::invalid_argument);
  EXPECT_THROW(allreduce(comm, AllreduceAlgo::native, &x, 1, DType::f32, opt),
               std::invalid_argument);
}

// Each rank contributes only its shard; the rest of its buffer is garbage to be overwritten.
void check_allgather(bool native, size_t count, DType dt) {
  auto& comm = world();
  const int n = comm.size();
  Buffer buf(dt, count);
  const Shard mine = shard_of(count, n, comm.rank());
  for (size_t i = 0; i < count; ++i) {
    const bool own = i >= mine.offset && i < mine.offset + mine.count;
    buf.set(i, own ? testing::wavy_value(comm.rank(), i) : std::nanf(""));
  }
  if (native) {
    comm.allgather(buf.data(), count, dt);
  } else {
    ring_allgather(comm, buf.data(), count, dt);
  }
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    const Shard s = shard_of(count, n, r);
    for (size_t i = s.offset; i < s.offset + s.count; ++i)
      wrong += buf.get(i) != testing::rounded(dt, testing::wavy_value(r, i));
  }
  EXPECT_EQ(wrong, 0u) << (native ? "native" : "ring") << " " << dtype_name(dt) << " count "
                       << count;
}

TEST(RingAllgather, GathersEveryShard) {
  for (DType dt : {DType::f32, DType::f16})
    for (size_t count : {size_t{1}, size_t{7}, size_t{65'537}, size_t{1'000'003}}) {
      check_allgather(false, count, dt);
      check_allgather(true, count, dt);
    }
}

// Link emulation changes when messages leave, never what arrives.
TEST(RingAllreduce, CorrectUnderLinkEmulation) {
  LinkConfig link;
  link.bandwidth_gbps = 200;
  link.latency_us = 3;
  MpiCommunicator comm(MPI_COMM_WORLD, link);
  const int n = comm.size();
  for (size_t count : {size_t{5}, size_t{300'007}}) {
    Buffer buf(DType::f32, count);
    std::vector<double> ref, mag;
    fill_wavy(buf, comm.rank(), n, ref, mag);
    ring_allreduce(comm, buf.data(), count, DType::f32);
    EXPECT_EQ(count_off(buf, ref, mag, n, 1.0, 0, count), 0u) << "count " << count;
    Buffer native(DType::f32, count);
    fill_wavy(native, comm.rank(), n, ref, mag);
    comm.allreduce(native.data(), count, DType::f32, ReduceOp::sum);
    EXPECT_EQ(count_off(native, ref, mag, n, 1.0, 0, count), 0u) << "native count " << count;
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
