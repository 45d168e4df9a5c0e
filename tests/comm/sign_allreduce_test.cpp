// comm/sign_allreduce.h on one process: the packed sign code and its bit order, the scales,
// the error-feedback identity of the compressed mean (on the simulation that the
// multi-rank test holds the real transport to, bit for bit), and the worker stage's bits
// with its input formed in pieces and on any number of threads.
#include "comm/sign_allreduce.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/sign_allreduce_reference.h"

namespace ringstep {
namespace {

TEST(SignCode, RoundTripsForEveryLengthModulo8) {
  for (size_t n = 0; n <= 41; ++n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = testing::sign_input(1, i, int(n));
    std::vector<uint8_t> packed((n + 7) / 8, 0xAB);
    pack_signs(x.data(), n, packed.data());
    std::vector<float> out(n, 7.0f);
    unpack_signs(packed.data(), n, 0.25f, out.data());
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(out[i], x[i] < 0 ? -0.25f : 0.25f) << "n " << n << " i " << i;
    if (n % 8 != 0) EXPECT_EQ(packed.back() >> (n % 8), 0) << "unused high bits, n " << n;
  }
}

// Element i is bit i mod 8 of byte i / 8, least significant first; set = negative; zero,
// negative zero and NaN count as +.
TEST(SignCode, BitOrderIsLeastSignificantFirstAndSetMeansNegative) {
  const float x[] = {-1.0f, 2.0f, 0.0f, -0.0f, -3.0f, NAN, 5.0f, -1e-30f, -4.0f, 1.0f};
  uint8_t packed[2] = {0xFF, 0xFF};
  pack_signs(x, 10, packed);
  EXPECT_EQ(packed[0], 0b1001'0001);
  EXPECT_EQ(packed[1], 0b0000'0001);
}

TEST(SignScale, MeanAbsAndL2) {
  const float z[] = {3.0f, -1.0f};
  EXPECT_EQ(sign_scale(z, 2, OneBitScale::mean_abs), 2.0f);
  EXPECT_EQ(sign_scale(z, 2, OneBitScale::l2), float(std::sqrt(5.0)));
  EXPECT_EQ(sign_scale(z, 0, OneBitScale::l2), 0.0f);
}

// mean |z| is the scale that minimises ||z - s sign z||_2; l2's ||z||/sqrt(n) is larger
// whenever the magnitudes differ, and so leaves more error.
TEST(SignScale, MeanAbsLeavesLessErrorThanL2) {
  std::vector<float> z(1000);
  for (size_t i = 0; i < z.size(); ++i) z[i] = testing::sign_input(0, i, 3);
  auto sq_err = [&](float s) {
    double e = 0;
    for (float v : z) e += std::pow(double(v) - (v < 0 ? -s : s), 2);
    return e;
  };
  const float m = sign_scale(z.data(), z.size(), OneBitScale::mean_abs);
  const float l = sign_scale(z.data(), z.size(), OneBitScale::l2);
  EXPECT_GT(l, m);
  EXPECT_LT(sq_err(m), sq_err(l));
  EXPECT_LE(sq_err(m), sq_err(m * 1.01f));
  EXPECT_LE(sq_err(m), sq_err(m * 0.99f));
}

TEST(SignChunk, PadsToAMultipleOf8PerRank) {
  EXPECT_EQ(sign_chunk_elems(1, 3), 8u);
  EXPECT_EQ(sign_chunk_elems(24, 3), 8u);
  EXPECT_EQ(sign_chunk_elems(25, 3), 16u);
  EXPECT_EQ(sign_chunk_elems(64, 2), 32u);
}

TEST(SignSegments, SplitCutsEverySegmentIntoBlocksFromItsStart) {
  using V = std::vector<size_t>;
  EXPECT_EQ(split_segments({10, 13, 30}, 30, 4), (V{4, 8, 10, 13, 17, 21, 25, 29, 30}));
  EXPECT_EQ(split_segments({}, 9, 4), (V{4, 8, 9}));
  EXPECT_EQ(split_segments({5, 9}, 9, 0), (V{5, 9})) << "block 0 cuts nothing";
  EXPECT_EQ(split_segments({3, 3, 9}, 9, 4), (V{3, 3, 7, 9})) << "an empty segment stays";
  EXPECT_EQ(split_segments({8, 16}, 16, 8), (V{8, 16})) << "no empty block at a segment's end";
}

// A message holds the scales of the segments its chunk touches: 64 elements on 2 ranks are
// chunks [0, 32) and [32, 64) of 4 packed bytes each, plus 4 bytes per scale slot.
TEST(SignSegments, AMessageCarriesOnlyItsChunksScales) {
  EXPECT_EQ(sign_allreduce_bytes(64, {}, 2), 2u * (4 + 4));
  EXPECT_EQ(sign_allreduce_bytes(64, {10, 40, 64}, 2), 2u * (2 * 4 + 4));  // 2 and 2 scales
  // Chunk 0 touches 4 segments, chunk 1 one: every message has room for 4.
  EXPECT_EQ(sign_allreduce_bytes(64, {8, 16, 24, 32, 64}, 2), 2u * (4 * 4 + 4));
  // 1024 blocks of 1024 over 4 ranks: 256 scales and 32 KiB of signs per message, 6 messages.
  const size_t count = size_t(1) << 20;
  EXPECT_EQ(sign_allreduce_bytes(count, split_segments({}, count, 1024), 4),
            6u * (256 * 4 + count / 32));
  EXPECT_EQ(sign_allreduce_bytes(count, {}, 1), 0u);
}

// Sum of outputs = sum of mean inputs - (mean over ranks of e_w + e_s), to fp32 rounding,
// over many calls: error feedback loses nothing, it only delays it.
TEST(SignAllreduceSim, ErrorFeedbackIdentityHoldsOverManyCalls) {
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    const int n = 3, calls = 60;
    const size_t count = 1001;
    testing::SignSim sim(n, count, split_segments({100, 700, count}, count, 64));
    std::vector<double> sum_out(count, 0), sum_mean(count, 0), mag(count, 0);
    for (int c = 0; c < calls; ++c) {
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) {
          sim.x[r][i] = testing::sign_input(r, i, c);
          sum_mean[i] += double(sim.x[r][i]) / n;
          mag[i] += std::fabs(sim.x[r][i]);
        }
      sim.step(kind);
      for (size_t i = 0; i < count; ++i) sum_out[i] += sim.x[0][i];
    }
    double worst = 0, drift = 0;
    for (size_t i = 0; i < count; ++i) {
      double held = 0;
      for (int r = 0; r < n; ++r) held += double(sim.worker_error[r][i]) / n;
      for (int j = 0; j < n; ++j) held += sim.server_error[j][i];  // one rank serves each i
      const double tol = 8 * 0x1p-24 * mag[i] + 1e-6;
      worst = std::max(worst, std::fabs(sum_out[i] - (sum_mean[i] - held)) / tol);
      drift = std::max(drift, std::fabs(sum_out[i] - sum_mean[i]));
    }
    EXPECT_LE(worst, 1.0) << name(kind);
    EXPECT_GT(drift, 1e-3) << "the identity must hold because of the buffers, not trivially";
  }
}

// A vector with several scale runs per segment, segments across code blocks, server chunks
// and groups (whose edge falls inside a byte), one of a single element and one shorter than a
// byte.
struct CodedVector {
  size_t n = 9 * kScaleRun + 77;
  std::vector<size_t> ends = {100, 103, 2 * kScaleRun + 5, 2 * kScaleRun + 6, 5 * kScaleRun + 3, n};
  std::vector<float> x, e;
  CodedVector() : x(n), e(n) {
    for (size_t i = 0; i < n; ++i) {
      x[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 13));
      e[i] = 0.01f * std::cos(float(i));
    }
  }
};

// The worker stage with its input formed piece by piece (SignInput, 1-bit Adam's momentum)
// codes what encode(x) codes, bit for bit: the same worker error and statistics, and the
// input is asked for every piece of kSignInputPiece elements from each segment's start once.
TEST(SignAllreduceEncode, InputFormedInPiecesMatchesTheStoredInput) {
  CodedVector v;
  std::vector<float> e2 = v.e;
  SignAllreduce a(v.n, v.ends, 3, 1, OneBitScale::mean_abs);
  SignAllreduce b(v.n, v.ends, 3, 1, OneBitScale::mean_abs);
  const SignAllreduceStats sa = a.encode(v.x.data(), v.e.data());
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> pieces;
  const SignAllreduceStats sb = b.encode(SignInput([&](size_t lo, size_t hi, float* z) {
                                           for (size_t i = lo; i < hi; ++i) z[i - lo] += v.x[i];
                                           std::lock_guard<std::mutex> lock(mu);
                                           pieces.push_back({lo, hi});
                                         }),
                                         e2.data());
  std::sort(pieces.begin(), pieces.end());
  std::vector<std::pair<size_t, size_t>> expected;
  for (size_t k = 0, start = 0; k < v.ends.size(); start = v.ends[k++])
    for (size_t lo = start; lo < v.ends[k]; lo += kSignInputPiece)
      expected.push_back({lo, std::min(v.ends[k], lo + kSignInputPiece)});
  EXPECT_EQ(pieces, expected);
  EXPECT_EQ(v.e, e2);
  EXPECT_EQ(sa.worker_sq_err, sb.worker_sq_err);
  EXPECT_EQ(sa.worker_sq_norm, sb.worker_sq_norm);
  EXPECT_EQ(sa.bytes_sent, sb.bytes_sent);
}

// The worker stage splits its passes over the calling thread's OpenMP team: 1, 2 and 3
// threads leave the same worker error and statistics, bit for bit.
TEST(SignAllreduceEncode, SameBitsOnAnyNumberOfThreads) {
  const int saved = omp_get_max_threads();
  std::vector<float> first;
  SignAllreduceStats first_stats;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    CodedVector v;
    SignAllreduce call(v.n, v.ends, 3, 1, OneBitScale::l2);
    const SignAllreduceStats st = call.encode(v.x.data(), v.e.data());
    if (first.empty()) {
      first = v.e;
      first_stats = st;
      continue;
    }
    EXPECT_EQ(v.e, first) << threads << " threads";
    EXPECT_EQ(st.worker_sq_norm, first_stats.worker_sq_norm) << threads << " threads";
    EXPECT_EQ(st.worker_sq_err, first_stats.worker_sq_err) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace ringstep
