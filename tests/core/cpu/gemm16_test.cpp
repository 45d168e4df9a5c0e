// gemm16 against an fp64 reference computed from the same 16-bit inputs, for both kernels
// (the native bf16 one, AMX or AVX512-BF16, skipped where the CPU has neither, and the
// forced fp32-sgemm one): every transpose
// combination, edge sizes around the 16 x 32 tile, padded leading dimensions, alpha/beta,
// beta = 0 over NaN, the trainer's shapes, inf inputs, and bit-identical results across
// buffer alignments and thread counts.
//
// Tolerance: an fp32 sum of K products that are exact in fp32 is off by at most about
// K * 2^-24 * sum_k |a_ik b_kj| (Higham, Accuracy and Stability, eq. 3.5), and typically by
// sqrt(K) * 2^-24 of it: for K <= 1536 that is 2.3e-6, so 1e-5 * sum|a b| (scaled by alpha,
// plus |beta c|) leaves a margin while a wrong index or a lost tile is off by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm_probe.h"
#include "core/dtype.h"
#include "core/threads.h"

namespace ringstep::cpu {
namespace {

constexpr double kRelTol = 1e-5;

// One GEMM problem: op(A) is M x K, op(B) is K x N, stored with leading dims >= the rows.
struct Problem {
  DType dt = DType::bf16;
  bool trans_a = false, trans_b = false;
  int M = 1, N = 1, K = 1;
  int lda = 0, ldb = 0, ldc = 0;  // 0: the dense row length
  float alpha = 1.0f, beta = 0.0f;
  std::vector<uint16_t> a, b;
  std::vector<float> c0;    // C before the call (NaN where beta == 0)
  std::vector<float> bias;  // added to each column when not empty

  int a_rows() const { return trans_a ? K : M; }
  int b_rows() const { return trans_b ? N : K; }
  double to_double(uint16_t h) const {
    return dt == DType::bf16 ? double(bf16_to_fp32(h)) : double(fp16_to_fp32(h));
  }
  double op_a(int i, int k) const {
    return to_double(trans_a ? a[size_t(k) * lda + i] : a[size_t(i) * lda + k]);
  }
  double op_b(int k, int j) const {
    return to_double(trans_b ? b[size_t(j) * ldb + k] : b[size_t(k) * ldb + j]);
  }
};

uint16_t to_16(DType dt, float x) { return dt == DType::bf16 ? fp32_to_bf16(x) : fp32_to_fp16(x); }

// Fills A, B and C with values uniform in [-1, 1) (C with NaN when beta == 0); extra_ld pads
// every leading dimension beyond the row length.
Problem make_problem(DType dt, bool ta, bool tb, int M, int N, int K, float alpha, float beta,
                     int extra_ld, uint32_t seed) {
  Problem p;
  p.dt = dt;
  p.trans_a = ta;
  p.trans_b = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.alpha = alpha;
  p.beta = beta;
  p.lda = (ta ? M : K) + extra_ld;
  p.ldb = (tb ? K : N) + extra_ld;
  p.ldc = N + extra_ld;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  p.a.resize(size_t(p.a_rows()) * p.lda);
  p.b.resize(size_t(p.b_rows()) * p.ldb);
  for (uint16_t& x : p.a) x = to_16(dt, dist(rng));
  for (uint16_t& x : p.b) x = to_16(dt, dist(rng));
  p.c0.resize(size_t(M) * p.ldc);
  for (float& x : p.c0) x = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
  return p;
}

std::vector<float> run(const Problem& p) {
  std::vector<float> c = p.c0;
  if (p.bias.empty()) {
    gemm16(p.dt, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
           p.beta, c.data(), p.ldc);
  } else {
    gemm16(p.dt, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, Operand16{p.a.data(), p.lda},
           Operand16{p.b.data(), p.ldb}, p.beta, c.data(), p.ldc, p.bias.data());
  }
  return c;
}

// Checks rows 0, row_step, 2 row_step, ... and the last row of C (all of it by default)
// against fp64; padding between rows must be untouched.
void expect_matches_fp64(const Problem& p, const std::vector<float>& c, int row_step = 1) {
  const std::string where = std::string(dtype_name(p.dt)) + " ta=" + std::to_string(p.trans_a) +
                            " tb=" + std::to_string(p.trans_b) + " M=" + std::to_string(p.M) +
                            " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) +
                            " beta=" + std::to_string(p.beta);
  // op(B) transposed, in double, so that each dot product reads two contiguous rows.
  std::vector<double> a_row(p.K), b_t(size_t(p.N) * p.K);
  for (int j = 0; j < p.N; ++j) {
    for (int k = 0; k < p.K; ++k) b_t[size_t(j) * p.K + k] = p.op_b(k, j);
  }
  int failures = 0;
  for (int i = 0; i < p.M; ++i) {
    if (i % row_step != 0 && i != p.M - 1) continue;
    for (int k = 0; k < p.K; ++k) a_row[k] = p.op_a(i, k);
    for (int j = 0; j < p.ldc; ++j) {
      const size_t idx = size_t(i) * p.ldc + j;
      if (j >= p.N) {  // padding: bitwise unchanged (NaN included)
        if (std::memcmp(&c[idx], &p.c0[idx], sizeof(float)) != 0 && ++failures <= 5) {
          ADD_FAILURE() << where << ": padding C(" << i << "," << j << ") was written";
        }
        continue;
      }
      double dot = 0.0, mag = 0.0;
      for (int k = 0; k < p.K; ++k) {
        const double t = a_row[k] * b_t[size_t(j) * p.K + k];
        dot += t;
        mag += std::fabs(t);
      }
      double ref = double(p.alpha) * dot, bound = std::fabs(double(p.alpha)) * mag;
      if (p.beta != 0.0f) {
        ref += double(p.beta) * p.c0[idx];
        bound += std::fabs(double(p.beta) * p.c0[idx]);
      }
      if (!p.bias.empty()) {
        ref += p.bias[j];
        bound += std::fabs(double(p.bias[j]));
      }
      const double err = std::fabs(double(c[idx]) - ref);
      if (!(err <= kRelTol * bound + 1e-30) && ++failures <= 5) {
        ADD_FAILURE() << where << ": C(" << i << "," << j << ") = " << c[idx] << ", fp64 " << ref
                      << ", |err| " << err << " > " << kRelTol * bound;
      }
    }
  }
  EXPECT_EQ(failures, 0) << where;
}

// Runs each test once per kernel: "native" (bf16 on AMX tiles or AVX512-BF16, whichever this
// CPU has) and "sgemm" (forced fallback).
class Gemm16Kernel : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const bool native = GetParam() == "native";
    gemm16_force_fallback(!native);
    if (native && gemm16_widens(DType::bf16)) {
      GTEST_SKIP() << "no AMX-BF16 (or tile permission) and no AVX512-BF16 on this CPU";
    }
    if (!native) ASSERT_STREQ(gemm16_kernel(DType::bf16), "fp32-sgemm");
  }
  void TearDown() override {
    const char* env = std::getenv("RINGSTEP_GEMM16");
    gemm16_force_fallback(env != nullptr && std::string(env) == "sgemm");
  }
};

TEST_P(Gemm16Kernel, EdgeSizesAllTransposesMatchFp64) {
  const int sizes[] = {1, 15, 16, 17, 31, 32, 33, 64, 100};
  const int depths[] = {1, 16, 31, 33, 64, 100};
  const float betas[] = {0.0f, 1.0f, 0.5f};
  uint32_t seed = 1;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    for (int M : sizes) {
      for (int N : sizes) {
        for (int K : depths) {
          // Cycle alpha, beta and the leading-dimension padding through the cases (alpha = 1
          // with beta = 0 takes the AMX kernel's direct store for full 32 x 32 blocks).
          const float alpha = seed % 2 ? 1.0f : -1.5f;
          const float beta = betas[seed % 3];
          const int extra_ld = int(seed % 4) * 3;
          const Problem p =
              make_problem(DType::bf16, ta, tb, M, N, K, alpha, beta, extra_ld, seed++);
          expect_matches_fp64(p, run(p));
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Depths on either side of a multiple of 384 (the AVX512-BF16 kernel's k chunk of 12 tiles,
// whose partial sums are stored in C and reloaded) and one of several chunks with a ragged
// last tile.
TEST_P(Gemm16Kernel, DepthsAcrossKChunksMatchFp64) {
  uint32_t seed = 500;
  for (int t = 0; t < 4; ++t) {
    for (int K : {383, 384, 385, 1000}) {
      const float beta = seed % 2 ? 0.0f : 0.5f;
      const Problem p = make_problem(DType::bf16, t & 1, t & 2, 70, 45, K, 1.0f, beta, 1, seed++);
      expect_matches_fp64(p, run(p));
    }
  }
}

// The bias is added to every row of its column, after alpha and beta; with beta = 0 the bits
// are those of C filled with the bias and beta = 1 (the linear forward's old way).
TEST_P(Gemm16Kernel, BiasIsAddedToEachColumn) {
  uint32_t seed = 600;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int t = 0; t < 4; ++t) {
    for (float beta : {0.0f, 1.0f, -0.5f}) {
      for (int K : {0, 45, 400}) {
        Problem p = make_problem(DType::bf16, t & 1, t & 2, 70, 45, K, -1.5f, beta, 2, seed++);
        p.bias.resize(p.N);
        for (float& x : p.bias) x = dist(rng);
        const std::vector<float> c = run(p);
        expect_matches_fp64(p, c);
        if (beta != 0.0f) continue;
        Problem filled = p;
        filled.bias.clear();
        filled.beta = 1.0f;
        for (int i = 0; i < p.M; ++i)
          std::copy(p.bias.begin(), p.bias.end(), filled.c0.begin() + size_t(i) * p.ldc);
        const std::vector<float> same = run(filled);
        EXPECT_EQ(std::memcmp(c.data(), same.data(), c.size() * 4), 0) << "t=" << t << " K=" << K;
      }
    }
  }
}

// The GEMMs of one small.yaml step (1024 tokens, C = 384; see bench/gemm16_bench.cpp), run
// in full and checked on every 13th row, plus an attention head product on strided slices.
TEST_P(Gemm16Kernel, TrainerShapesMatchFp64) {
  struct Case {
    bool ta, tb;
    int M, N, K;
    float beta;
    int lda, ldb;
  };
  const Case cases[] = {
      {false, true, 1024, 1152, 384, 0.0f, 384, 384},    // qkv forward: X W^T
      {false, false, 1024, 384, 1536, 1.0f, 1536, 384},  // fcproj backward: dX += dY W
      {true, false, 1536, 384, 1024, 1.0f, 1536, 384},   // fc dW += dY^T X
      {false, true, 256, 256, 64, 0.0f, 1152, 1152},     // attention q k^T, rows of 3C
      {false, false, 256, 64, 256, 0.0f, 256, 1152},     // attention P v
  };
  uint32_t seed = 100;
  for (const Case& cs : cases) {
    Problem p = make_problem(DType::bf16, cs.ta, cs.tb, cs.M, cs.N, cs.K, 1.0f, cs.beta, 0, seed++);
    // Re-lay A and B out with the trainer's leading dimensions.
    auto relayout = [](std::vector<uint16_t>& v, int rows, int cols, int ld) {
      std::vector<uint16_t> out(size_t(rows) * ld, 0x7fc0);  // NaN in the gaps
      for (int r = 0; r < rows; ++r) {
        std::memcpy(&out[size_t(r) * ld], &v[size_t(r) * cols], size_t(cols) * 2);
      }
      v.swap(out);
    };
    relayout(p.a, p.a_rows(), p.lda, cs.lda);
    relayout(p.b, p.b_rows(), p.ldb, cs.ldb);
    p.lda = cs.lda;
    p.ldb = cs.ldb;
    expect_matches_fp64(p, run(p), 13);
  }
}

TEST_P(Gemm16Kernel, BetaZeroIgnoresNanInC) {
  Problem p = make_problem(DType::bf16, false, true, 40, 50, 70, 1.0f, 0.0f, 5, 7);
  const std::vector<float> c = run(p);
  for (int i = 0; i < p.M; ++i) {
    for (int j = 0; j < p.N; ++j) ASSERT_FALSE(std::isnan(c[size_t(i) * p.ldc + j]));
  }
  expect_matches_fp64(p, c);
}

// An inf in A gives +-inf where it meets a nonzero B value and NaN where it meets 0 or an
// inf of the other sign, exactly as the fp64 reference does.
TEST_P(Gemm16Kernel, InfInputsPropagateLikeFp64) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (int t = 0; t < 4; ++t) {
      Problem p = make_problem(dt, t & 1, t & 2, 20, 40, 50, 1.0f, 0.0f, 0, 11 + t);
      const float inf = std::numeric_limits<float>::infinity();
      // A(3, 7) = +inf, A(5, 9) = -inf, B(7, j) = 0 for even j, B(9, 2) = -inf.
      auto a_at = [&](int i, int k) -> uint16_t& {
        return p.trans_a ? p.a[size_t(k) * p.lda + i] : p.a[size_t(i) * p.lda + k];
      };
      auto b_at = [&](int k, int j) -> uint16_t& {
        return p.trans_b ? p.b[size_t(j) * p.ldb + k] : p.b[size_t(k) * p.ldb + j];
      };
      a_at(3, 7) = to_16(dt, inf);
      a_at(5, 9) = to_16(dt, -inf);
      for (int j = 0; j < p.N; j += 2) b_at(7, j) = 0;
      b_at(9, 2) = to_16(dt, -inf);
      const std::vector<float> c = run(p);
      for (int i = 0; i < p.M; ++i) {
        for (int j = 0; j < p.N; ++j) {
          double ref = 0.0;
          for (int k = 0; k < p.K; ++k) ref += p.op_a(i, k) * p.op_b(k, j);
          const float got = c[size_t(i) * p.ldc + j];
          if (std::isfinite(ref)) {
            ASSERT_TRUE(std::isfinite(got)) << "C(" << i << "," << j << ")";
          } else if (std::isnan(ref)) {
            ASSERT_TRUE(std::isnan(got)) << "C(" << i << "," << j << ") = " << got;
          } else {
            ASSERT_EQ(got, float(ref)) << "C(" << i << "," << j << ")";
          }
        }
      }
      // Row 3 meets B(7, even j) = 0: NaN; row 5 meets B(9, 2) = -inf: +inf.
      EXPECT_TRUE(std::isnan(c[size_t(3) * p.ldc + 0]));
      EXPECT_EQ(c[size_t(5) * p.ldc + 2], inf);
    }
  }
}

// Operands that carry their widening (A, B or both, dense while the bits' rows are padded)
// give gemm16's bits; the AMX kernel reads only the bits. Where gemm16 widens, an operand
// may come without bits; where it does not, that is refused.
TEST_P(Gemm16Kernel, WidenedOperandsGiveTheSameBits) {
  auto dense = [](const std::vector<uint16_t>& bits, int rows, int cols, int ld) {
    std::vector<float> w(size_t(rows) * cols);
    for (int r = 0; r < rows; ++r)
      bf16_to_fp32(bits.data() + size_t(r) * ld, w.data() + size_t(r) * cols, size_t(cols));
    return w;
  };
  for (int t = 0; t < 4; ++t) {
    const Problem p = make_problem(DType::bf16, t & 1, t & 2, 70, 45, 130, 1.0f, 0.5f, 3, 23);
    const std::vector<float> ref = run(p);
    const int a_cols = p.trans_a ? p.M : p.K, b_cols = p.trans_b ? p.K : p.N;
    const std::vector<float> a32 = dense(p.a, p.a_rows(), a_cols, p.lda);
    const std::vector<float> b32 = dense(p.b, p.b_rows(), b_cols, p.ldb);
    for (int wide = 1; wide < 4; ++wide) {  // bit 0: A carries its widening, bit 1: B does
      Operand16 A{p.a.data(), p.lda}, B{p.b.data(), p.ldb};
      if (wide & 1) A = {p.a.data(), p.lda, a32.data(), a_cols};
      if (wide & 2) B = {p.b.data(), p.ldb, b32.data(), b_cols};
      std::vector<float> c = p.c0;
      gemm16(p.dt, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, A, B, p.beta, c.data(), p.ldc);
      EXPECT_EQ(std::memcmp(c.data(), ref.data(), ref.size() * 4), 0)
          << "t=" << t << " wide=" << wide;
      if (wide & 1) A.bits = nullptr;
      if (wide & 2) B.bits = nullptr;
      c = p.c0;
      auto without_bits = [&] {
        gemm16(p.dt, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, A, B, p.beta, c.data(), p.ldc);
      };
      if (gemm16_widens(DType::bf16)) {
        without_bits();
        EXPECT_EQ(std::memcmp(c.data(), ref.data(), ref.size() * 4), 0)
            << "no bits, t=" << t << " wide=" << wide;
      } else {
        EXPECT_THROW(without_bits(), std::invalid_argument);
      }
    }
  }
  EXPECT_EQ(gemm16_widens(DType::bf16), GetParam() == "sgemm");
}

// A B packed once (PackedB16) gives gemm16's bits on B itself, for every transpose, edge
// sizes, a bias, and products of several row counts that share it (a linear's row blocks);
// K or N other than the packed ones are refused.
TEST_P(Gemm16Kernel, PackedOperandGivesTheSameBits) {
  for (int t = 0; t < 4; ++t) {
    for (const int K : {1, 31, 33, 400}) {
      for (const int N : {1, 33, 70}) {
        Problem p = make_problem(DType::bf16, t & 1, t & 2, 75, N, K, 1.0f, 0.0f, 3, 29 + K + N);
        p.bias.resize(size_t(N));
        for (int j = 0; j < N; ++j) p.bias[j] = 0.25f * float(j % 7) - 0.5f;
        PackedB16 packed;
        packed.pack(p.dt, p.trans_b, K, N, Operand16{p.b.data(), p.ldb});
        for (const int M : {p.M, 1, 40}) {
          Problem q = p;
          q.M = M;
          const std::vector<float> ref = run(q);
          std::vector<float> c = q.c0;
          gemm16(q.dt, q.trans_a, M, N, K, q.alpha, Operand16{q.a.data(), q.lda}, packed, q.beta,
                 c.data(), q.ldc, q.bias.data());
          ASSERT_EQ(std::memcmp(c.data(), ref.data(), size_t(M) * q.ldc * 4), 0)
              << "t=" << t << " M=" << M << " N=" << N << " K=" << K;
        }
        std::vector<float> c = p.c0;
        EXPECT_THROW(gemm16(p.dt, p.trans_a, p.M, N, K + 1, p.alpha, Operand16{p.a.data(), p.lda},
                            packed, p.beta, c.data(), p.ldc),
                     std::invalid_argument);
      }
    }
  }
}

// The same inputs at other addresses (2 and 64 bytes further) give the same bits.
TEST_P(Gemm16Kernel, AlignmentDoesNotChangeBits) {
  for (int t = 0; t < 4; ++t) {
    const Problem p = make_problem(DType::bf16, t & 1, t & 2, 100, 70, 300, 1.0f, 0.5f, 1, 21);
    const std::vector<float> ref = run(p);
    for (size_t shift_bytes : {size_t(2), size_t(4), size_t(64)}) {
      const size_t s16 = shift_bytes / 2, s32 = (shift_bytes + 3) / 4;
      std::vector<uint16_t> a(p.a.size() + s16), b(p.b.size() + s16);
      std::vector<float> c(p.c0.size() + s32);
      std::memcpy(a.data() + s16, p.a.data(), p.a.size() * 2);
      std::memcpy(b.data() + s16, p.b.data(), p.b.size() * 2);
      std::memcpy(c.data() + s32, p.c0.data(), p.c0.size() * 4);
      gemm16(p.dt, p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, a.data() + s16, p.lda,
             b.data() + s16, p.ldb, p.beta, c.data() + s32, p.ldc);
      EXPECT_EQ(std::memcmp(c.data() + s32, ref.data(), ref.size() * 4), 0)
          << "shift " << shift_bytes << " bytes, ta=" << p.trans_a << " tb=" << p.trans_b;
    }
  }
}

// One and two threads (OpenMP and OpenBLAS) give the same bits; on a machine whose sgemm
// itself is not thread-count invariant, the sgemm kernel is held to fp32 rounding instead.
TEST_P(Gemm16Kernel, ThreadCountDoesNotChangeBits) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  const bool bits = GetParam() == "native" || test::SgemmThreadInvariant();
  auto expect_same = [&](const std::vector<float>& a, const std::vector<float>& b, int t) {
    if (bits)
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "t=" << t;
    else
      EXPECT_LE(test::MaxRelDiff(a, b), 1e-5) << "t=" << t << " (sgemm not thread-invariant)";
  };
  for (int t = 0; t < 4; ++t) {
    const Problem p = make_problem(DType::bf16, t & 1, t & 2, 512, 384, 384, 1.0f, 1.0f, 0, 31);
    set_compute_threads(1);
    const std::vector<float> one = run(p);
    set_compute_threads(2);
    const std::vector<float> two = run(p);
    set_compute_threads(3);
    const std::vector<float> three = run(p);
    expect_same(two, one, t);
    expect_same(three, one, t);
  }
  set_compute_threads(saved);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

INSTANTIATE_TEST_SUITE_P(Gemm16, Gemm16Kernel, testing::Values("native", "sgemm"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// fp16 always takes the fp32-sgemm kernel; it is checked on the same edge sizes.
TEST(Gemm16, Fp16AllTransposesMatchFp64) {
  EXPECT_STREQ(gemm16_kernel(DType::f16), "fp32-sgemm");
  const int sizes[] = {1, 16, 17, 33, 100};
  uint32_t seed = 500;
  for (int t = 0; t < 4; ++t) {
    for (int M : sizes) {
      for (int N : sizes) {
        for (int K : sizes) {
          const Problem p = make_problem(DType::f16, t & 1, t & 2, M, N, K, 0.75f,
                                         seed % 2 ? 0.5f : 0.0f, int(seed % 3), seed);
          ++seed;
          expect_matches_fp64(p, run(p));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(Gemm16, EmptyDepthScalesC) {
  std::vector<float> c = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f};
  gemm16(DType::bf16, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c[0], 0.5f);
  EXPECT_EQ(c[1], 1.0f);
  EXPECT_TRUE(std::isnan(c[2]));
  gemm16(DType::bf16, false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, std::vector<float>(4, 0.0f));
}

TEST(Gemm16, RejectsBadArguments) {
  std::vector<uint16_t> a(64), b(64);
  std::vector<float> c(64);
  auto call = [&](DType dt, int M, int N, int K, int lda, int ldb, int ldc) {
    gemm16(dt, false, false, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), ldc);
  };
  EXPECT_NO_THROW(call(DType::bf16, 4, 4, 4, 4, 4, 4));
  EXPECT_THROW(call(DType::f32, 4, 4, 4, 4, 4, 4), std::invalid_argument);
  EXPECT_THROW(call(DType::bf16, -1, 4, 4, 4, 4, 4), std::invalid_argument);
  EXPECT_THROW(call(DType::bf16, 4, 4, 4, 3, 4, 4), std::invalid_argument);  // lda < K
  EXPECT_THROW(call(DType::bf16, 4, 4, 4, 4, 3, 4), std::invalid_argument);  // ldb < N
  EXPECT_THROW(call(DType::bf16, 4, 4, 4, 4, 4, 3), std::invalid_argument);  // ldc < N
}

}  // namespace
}  // namespace ringstep::cpu
