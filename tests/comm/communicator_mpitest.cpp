// The MPI transport's own collectives and point-to-point, and its error reporting.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_communicator.h"
#include "comm/ring_allreduce.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"

namespace ringstep {
namespace {

using testing::Buffer;
using testing::world;

TEST(CommMpi, RanksAndNode) {
  auto& comm = world();
  EXPECT_GE(comm.rank(), 0);
  EXPECT_LT(comm.rank(), comm.size());
  EXPECT_GE(comm.local_rank(), 0);
  EXPECT_LT(comm.local_rank(), comm.local_size());
  EXPECT_LE(comm.local_size(), comm.size());
}

TEST(CommMpi, NativeAllreduceSumsEveryDtype) {
  auto& comm = world();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const size_t count = 40'001;
    Buffer buf(dt, count), expected(dt, count);
    for (size_t i = 0; i < count; ++i) {
      buf.set(i, testing::exact_value(comm.rank(), i));
      double sum = 0;
      for (int r = 0; r < comm.size(); ++r) sum += testing::exact_value(r, i);
      expected.set(i, static_cast<float>(sum));
    }
    Buffer async = buf;
    comm.allreduce(buf.data(), count, dt, ReduceOp::sum);
    comm.allreduce_async(async.data(), count, dt, ReduceOp::sum).wait();
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i)
      wrong += !buf.same_bits(expected, i) + !async.same_bits(expected, i);
    EXPECT_EQ(wrong, 0u) << dtype_name(dt);
  }
}

// MPI_MAX/MPI_MIN for fp32 and comm/reduce.h's kernels for fp16/bf16, in every collective
// that reduces. Compared by value: MPI's own fp32 MAX promises no sign for a +0/-0 tie.
TEST(CommMpi, NativeMaxAndMinEveryDtype) {
  auto& comm = world();
  const int n = comm.size();
  const size_t count = 40'001;
  const Shard mine = shard_of(count, n, comm.rank());
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      Buffer buf(dt, count), expected(dt, count);
      testing::fill_extreme(buf, expected, comm.rank(), n, op);
      Buffer async = buf, scattered = buf;
      comm.allreduce(buf.data(), count, dt, op);
      comm.allreduce_async(async.data(), count, dt, op).wait();
      comm.reduce_scatter(scattered.data(), count, dt, op);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        wrong += (buf.get(i) != expected.get(i)) + (async.get(i) != expected.get(i));
        if (i >= mine.offset && i < mine.offset + mine.count)
          wrong += scattered.get(i) != expected.get(i);
      }
      EXPECT_EQ(wrong, 0u) << dtype_name(dt) << " " << reduce_op_name(op);
    }
}

// With two ranks both algorithms make one fp32 addition per element, rounded once: the
// user-defined fp16/bf16 MPI_Op must round exactly like the ring's hop.
TEST(CommMpi, HalfPrecisionOpRoundsLikeTheRing) {
  auto& comm = world();
  if (comm.size() != 2) GTEST_SKIP() << "one hop per element only with 2 ranks";
  for (DType dt : {DType::f16, DType::bf16}) {
    const size_t count = 50'000;
    Buffer ring(dt, count), native(dt, count);
    for (size_t i = 0; i < count; ++i) {
      ring.set(i, testing::wavy_value(comm.rank(), i));
      native.set(i, testing::wavy_value(comm.rank(), i));
    }
    RingOptions opt;
    opt.small_bytes = 0;
    ring_allreduce(comm, ring.data(), count, dt, opt);
    comm.allreduce(native.data(), count, dt, ReduceOp::sum);
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) differ += !ring.same_bits(native, i);
    EXPECT_EQ(differ, 0u) << dtype_name(dt);
  }
}

TEST(CommMpi, AlltoallSwapsBlocks) {
  auto& comm = world();
  const int n = comm.size();
  const size_t block = 1001;
  Buffer buf(DType::f32, block * n);
  for (int j = 0; j < n; ++j)
    for (size_t k = 0; k < block; ++k)
      buf.set(j * block + k, comm.rank() * 1000.0f + j + k * 1e-3f);
  comm.alltoall(buf.data(), buf.count(), DType::f32);
  size_t wrong = 0;
  for (int j = 0; j < n; ++j)  // block j now holds what rank j sent to us
    for (size_t k = 0; k < block; ++k)
      wrong += buf.get(j * block + k) != j * 1000.0f + comm.rank() + k * 1e-3f;
  EXPECT_EQ(wrong, 0u);
  // Checked before any message moves, identically on every rank.
  if (n > 1) EXPECT_THROW(comm.alltoall(buf.data(), block * n + 1, DType::f32), CommError);
}

TEST(CommMpi, BroadcastFromEveryRoot) {
  auto& comm = world();
  for (int root = 0; root < comm.size(); ++root) {
    Buffer buf(DType::bf16, 777), async(DType::bf16, 777);
    for (size_t i = 0; i < buf.count(); ++i) {
      buf.set(i, comm.rank() == root ? static_cast<float>(i % 50) : -1.0f);
      async.set(i, comm.rank() == root ? static_cast<float>(i % 60) : -1.0f);
    }
    comm.broadcast(buf.data(), buf.count(), DType::bf16, root);
    comm.broadcast_async(async.data(), async.count(), DType::bf16, root).wait();
    size_t wrong = 0;
    for (size_t i = 0; i < buf.count(); ++i)
      wrong +=
          (buf.get(i) != static_cast<float>(i % 50)) + (async.get(i) != static_cast<float>(i % 60));
    EXPECT_EQ(wrong, 0u) << "root " << root;
  }
}

TEST(CommMpi, NativeReduceScatterAndAllgatherAsync) {
  auto& comm = world();
  const int n = comm.size();
  const size_t count = 10'001;
  Buffer buf(DType::f32, count);
  for (size_t i = 0; i < count; ++i) buf.set(i, testing::exact_value(comm.rank(), i));
  comm.reduce_scatter_async(buf.data(), count, DType::f32, ReduceOp::sum).wait();
  comm.allgather_async(buf.data(), count, DType::f32).wait();  // = an allreduce
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += testing::exact_value(r, i);
    wrong += buf.get(i) != static_cast<float>(sum);
  }
  EXPECT_EQ(wrong, 0u);
  comm.barrier_async().wait();
  comm.barrier();
}

TEST(CommMpi, PointToPointAroundTheRing) {
  auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  Buffer out(DType::f16, 333), in(DType::f16, 333);
  for (size_t i = 0; i < out.count(); ++i) out.set(i, static_cast<float>(r * 100 + i % 97));
  CommHandle recv = comm.irecv(in.data(), in.count(), DType::f16, (r + n - 1) % n, 7);
  comm.send(out.data(), out.count(), DType::f16, (r + 1) % n, 7);
  recv.wait();
  EXPECT_TRUE(recv.test());
  const int left = (r + n - 1) % n;
  size_t wrong = 0;
  for (size_t i = 0; i < in.count(); ++i)
    wrong += in.get(i) != static_cast<float>(left * 100 + i % 97);
  EXPECT_EQ(wrong, 0u);
}

// MPI_ERRORS_RETURN + MPI_CHECK: a failed call is a CommError naming the call and the rank.
TEST(CommMpi, FailedCallNamesCallAndRank) {
  auto& comm = world();
  std::string message;
  if (comm.rank() == 0) {
    float big[16] = {};
    comm.send(big, 16, DType::f32, 1, 11);
  } else if (comm.rank() == 1) {
    float small[4];
    try {
      comm.recv(small, 4, DType::f32, 0, 11);  // truncated: 16 elements arrive
    } catch (const CommError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("MPI_"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    EXPECT_NE(message.find("mpi_communicator.cpp"), std::string::npos) << message;
  }
  comm.barrier();
}

TEST(CommMpi, AllgatherBytesPlacesRecordsByRank) {
  auto& comm = world();
  struct Rec {
    int rank;
    double x;
  };
  std::vector<Rec> all(static_cast<size_t>(comm.size()));
  all[static_cast<size_t>(comm.rank())] = {comm.rank(), comm.rank() * 0.5};
  comm.allgather_bytes(all.data(), sizeof(Rec));
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_EQ(all[r].rank, r);
    EXPECT_EQ(all[r].x, r * 0.5);
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
