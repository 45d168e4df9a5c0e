// Pure pieces of the ring: segment ownership, sub-chunk counts, the reduction kernel.
#include "comm/ring_allreduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "comm/reduce.h"

namespace ringstep {
namespace {

TEST(CommShard, CoversTheBufferInRankOrder) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1'000'003}}) {
    for (int n : {1, 2, 3, 4, 7}) {
      size_t next = 0;
      for (int r = 0; r < n; ++r) {
        const Shard s = shard_of(count, n, r);
        EXPECT_EQ(s.offset, next) << count << "/" << n << " rank " << r;
        EXPECT_LE(s.count, count / n + 1);
        EXPECT_GE(s.count, count / n);
        next += s.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_EQ(shard_of(10, 4, 0).count, 3u);  // the first count % n ranks take one more
  EXPECT_EQ(shard_of(10, 4, 1).count, 3u);
  EXPECT_EQ(shard_of(10, 4, 2).count, 2u);
  EXPECT_EQ(shard_of(10, 4, 3).offset, 8u);
  EXPECT_EQ(shard_of(2, 4, 3).count, 0u);  // fewer elements than ranks
}

TEST(CommRingChunks, SplitTheLargestSegmentBySubChunkBytes) {
  EXPECT_EQ(ring_chunks_per_segment(0, 2, DType::f32, 128 << 10), 1u);
  EXPECT_EQ(ring_chunks_per_segment(1, 4, DType::f32, 128 << 10), 1u);
  // 16 MiB of fp32 on 2 ranks: 8 MiB segments, 64 sub-chunks of 128 KiB.
  EXPECT_EQ(ring_chunks_per_segment(4 << 20, 2, DType::f32, 128 << 10), 64u);
  EXPECT_EQ(ring_chunks_per_segment(4 << 20, 2, DType::bf16, 128 << 10), 32u);
  EXPECT_EQ(ring_chunks_per_segment((4 << 20) + 2, 2, DType::f32, 128 << 10), 65u);
  EXPECT_EQ(ring_chunks_per_segment(1000, 1, DType::f32, 4), 1000u);
}

// The ring's own sub-chunk rule (ring_allreduce.h), per transfer path.
TEST(CommRingChunks, DefaultSubChunkFollowsTheTransferPath) {
  constexpr size_t KiB = 1024;
  EXPECT_EQ(ring_default_chunk_bytes(64 << 20, TransferPath::cpu_copy), 512 * KiB);
  EXPECT_EQ(ring_default_chunk_bytes(2048 * KiB, TransferPath::cpu_copy), 512 * KiB);
  // Fewer than 4 sub-chunks of 512 KiB: the whole segment is one.
  EXPECT_EQ(ring_default_chunk_bytes(2048 * KiB - 1, TransferPath::cpu_copy), 2048 * KiB - 1);
  EXPECT_EQ(ring_default_chunk_bytes(0, TransferPath::cpu_copy), 1u);
  EXPECT_EQ(ring_default_chunk_bytes(64 << 20, TransferPath::link), 128 * KiB);
  EXPECT_EQ(ring_default_chunk_bytes(1000, TransferPath::link), 128 * KiB);
}

TEST(CommReduce, Fp32AddsAndDivides) {
  std::vector<float> a = {1, 2, 3, -4, 1e30f}, b = {0.5f, -2, 1, 4, 1e30f};
  reduce_sum(a.data(), b.data(), a.size(), DType::f32);
  EXPECT_EQ(a, (std::vector<float>{1.5f, 0, 4, 0, 2e30f}));
  reduce_sum(a.data(), b.data(), 3, DType::f32, 2.0f);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(a[2], 2.5f);
  divide_by(a.data(), 1, DType::f32, 4.0f);
  EXPECT_EQ(a[0], 0.25f);
}

// One hop: fp32 sum of the two 16-bit values, rounded to nearest even once.
TEST(CommReduce, HalfPrecisionRoundsOncePerHop) {
  // fp16 around 2048 has spacing 2: 2048 + 1 is a tie and goes to the even 2048; 2050 + 1
  // goes to 2052. Accumulating in fp16 or rounding twice would differ on these.
  std::vector<uint16_t> a = {fp32_to_fp16(2048), fp32_to_fp16(2050), fp32_to_fp16(0.1f)};
  std::vector<uint16_t> b = {fp32_to_fp16(1), fp32_to_fp16(1), fp32_to_fp16(0.2f)};
  reduce_sum(a.data(), b.data(), a.size(), DType::f16);
  EXPECT_EQ(fp16_to_fp32(a[0]), 2048.0f);
  EXPECT_EQ(fp16_to_fp32(a[1]), 2052.0f);
  EXPECT_EQ(a[2],
            fp32_to_fp16(fp16_to_fp32(fp32_to_fp16(0.1f)) + fp16_to_fp32(fp32_to_fp16(0.2f))));
  // bf16 keeps 8 significant bits: 256 + 1 is a tie -> 256; 258 + 1 -> 260.
  std::vector<uint16_t> c = {fp32_to_bf16(256), fp32_to_bf16(258)};
  std::vector<uint16_t> d = {fp32_to_bf16(1), fp32_to_bf16(1)};
  reduce_sum(c.data(), d.data(), c.size(), DType::bf16);
  EXPECT_EQ(bf16_to_fp32(c[0]), 256.0f);
  EXPECT_EQ(bf16_to_fp32(c[1]), 260.0f);
  // Averaging divides before the single rounding.
  std::vector<uint16_t> e = {fp32_to_fp16(3)}, f = {fp32_to_fp16(4)};
  reduce_sum(e.data(), f.data(), 1, DType::f16, 2.0f);
  EXPECT_EQ(fp16_to_fp32(e[0]), 3.5f);
}

TEST(CommReduce, LongBuffersMatchScalarPerElement) {
  const size_t n = 2000;  // several staging blocks plus a tail
  std::vector<uint16_t> a(n), b(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = fp32_to_bf16(std::sin(0.01f * i) * 300);
    b[i] = fp32_to_bf16(std::cos(0.02f * i) * 7);
    want[i] = fp32_to_bf16(bf16_to_fp32(a[i]) + bf16_to_fp32(b[i]));
  }
  reduce_sum(a.data(), b.data(), n, DType::bf16);
  EXPECT_EQ(a, want);
}

// Partners of recursive doubling combine in opposite orders; max and min must not care.
TEST(CommReduce, MaxAndMinAreExactAndCommutativeToTheBit) {
  const std::vector<float> x = {1, -3, 0.0f, -0.0f, 0.0f, -0.0f, 2.5f, -INFINITY, NAN, 7};
  const std::vector<float> y = {2, -4, -0.0f, 0.0f, 0.0f, -0.0f, 2.5f, 5, 1, NAN};
  const std::vector<float> want_max = {2, -3, 0.0f, 0.0f, 0.0f, -0.0f, 2.5f, 5, NAN, NAN};
  const std::vector<float> want_min = {1, -4, -0.0f, -0.0f, 0.0f, -0.0f, 2.5f, -INFINITY, NAN, NAN};
  for (auto [op, want] : {std::pair{ReduceOp::max, want_max}, std::pair{ReduceOp::min, want_min}}) {
    std::vector<float> xy = x, yx = y;
    reduce(op, xy.data(), y.data(), x.size(), DType::f32);
    reduce(op, yx.data(), x.data(), x.size(), DType::f32);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(std::memcmp(&xy[i], &yx[i], sizeof(float)), 0) << reduce_op_name(op) << " " << i;
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(xy[i])) << reduce_op_name(op) << " " << i;
      } else {
        EXPECT_EQ(xy[i], want[i]) << reduce_op_name(op) << " " << i;
        EXPECT_EQ(std::signbit(xy[i]), std::signbit(want[i])) << reduce_op_name(op) << " " << i;
      }
    }
  }
  // 16-bit values pass through fp32 unrounded: the larger bf16 comes back as it was.
  std::vector<uint16_t> a = {fp32_to_bf16(1.1f), fp32_to_bf16(-300)};
  const std::vector<uint16_t> b = {fp32_to_bf16(1.2f), fp32_to_bf16(-301)};
  const std::vector<uint16_t> larger = {b[0], a[1]};
  reduce(ReduceOp::max, a.data(), b.data(), a.size(), DType::bf16);
  EXPECT_EQ(a, larger);
  EXPECT_THROW(reduce(ReduceOp::max, a.data(), b.data(), 1, DType::bf16, 2.0f),
               std::invalid_argument);
}

TEST(CommReduce, KeepsInfAndNan) {
  std::vector<float> a = {INFINITY, 1.0f}, b = {1.0f, NAN};
  reduce_sum(a.data(), b.data(), 2, DType::f32);
  EXPECT_TRUE(std::isinf(a[0]));
  EXPECT_TRUE(std::isnan(a[1]));
  std::vector<uint16_t> h = {fp32_to_fp16(60000)}, g = {fp32_to_fp16(60000)};
  reduce_sum(h.data(), g.data(), 1, DType::f16);  // overflows fp16, as on a GPU
  EXPECT_TRUE(std::isinf(fp16_to_fp32(h[0])));
}

}  // namespace
}  // namespace ringstep

// The ring's schedule on its own (the host ring and the NCCL device ring both follow it):
// N simulated ranks exchanging sub-chunks step by step, as the schedule says, end with the
// exact sum of integer-valued inputs on every rank, for counts that do and do not divide.
namespace ringstep {
namespace {

TEST(RingSchedule, SimulatedRanksEndWithTheExactSum) {
  for (int n : {1, 2, 3, 4, 5})
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(64), size_t(1001)})
      for (size_t chunks : {size_t(1), size_t(3)}) {
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " count=" << count << " chunks=" << chunks);
        std::vector<std::vector<double>> buf(n, std::vector<double>(count));
        std::vector<double> want(count, 0.0);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            want[i] += buf[r][i] = double((r + 1) * 1000 + i % 97);
        const RingSchedule probe{count, n, 0, chunks};
        for (int s = 0; s < probe.steps(); ++s)
          for (size_t j = 0; j < chunks; ++j) {
            auto next = buf;  // every rank's step s happens at once
            for (int r = 0; r < n; ++r) {
              const int l = (r + n - 1) % n;
              const RingSchedule me{count, n, r, chunks}, left{count, n, l, chunks};
              const Shard in = me.piece(me.recv_segment(s), j);
              ASSERT_EQ(in.offset, left.piece(left.send_segment(s), j).offset);  // what left sends
              for (size_t i = in.offset; i < in.offset + in.count; ++i)
                next[r][i] = me.reducing(s) ? buf[r][i] + buf[l][i] : buf[l][i];
            }
            buf = std::move(next);
          }
        for (int r = 0; r < n; ++r) EXPECT_EQ(buf[r], want) << "rank " << r;
      }
}

}  // namespace
}  // namespace ringstep
