// sgemm (both kernels where the build has BLAS) and gemm_packed against a float64 product
// of the same float inputs: every transpose, edge sizes on both register-block dimensions,
// K past one depth block, N past one column block, padded leading dims, both betas and the
// bias. Our kernel's bits must not depend on the thread count or on how rows are split.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/sgemm.h"

namespace ringstep::cpu {
namespace {

struct Case {
  bool trans_a, trans_b;
  int M, N, K;
};

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Stored operands with padded leading dims, as attention's strided head slices are. B is
// stored for PACKED_K x PACKED_N (>= K x N), so that a product can read a prefix of it.
struct Operands {
  int lda, ldb, ldc;
  std::vector<float> a, b, c, bias;
};

Operands make(const Case& t, int packed_K, int packed_N, std::mt19937& rng) {
  Operands o;
  const int a_rows = t.trans_a ? t.K : t.M, a_cols = t.trans_a ? t.M : t.K;
  const int b_rows = t.trans_b ? packed_N : packed_K, b_cols = t.trans_b ? packed_K : packed_N;
  o.lda = a_cols + 3;
  o.ldb = b_cols + 5;
  o.ldc = t.N + 2;
  o.a = random_floats(size_t(a_rows) * o.lda, rng);
  o.b = random_floats(size_t(b_rows) * o.ldb, rng);
  o.c = random_floats(size_t(t.M) * o.ldc, rng);
  o.bias = random_floats(t.N, rng);
  return o;
}

// alpha * op(A) op(B) + beta * C (+ bias) in float64; BOUND gets each element's float error
// bound, (K + 3) eps (|alpha| sum |a b| + |beta c| + |bias|) (Higham 2002, 3.1: gamma_K of
// the dot product, and a rounding each for alpha, beta and the bias).
std::vector<double> reference(const Case& t, const Operands& o, double alpha, double beta,
                              bool with_bias, std::vector<double>& bound) {
  std::vector<double> c(o.c.begin(), o.c.end());
  bound.assign(c.size(), 0.0);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int i = 0; i < t.M; ++i) {
    for (int j = 0; j < t.N; ++j) {
      double sum = 0, sum_abs = 0;
      for (int k = 0; k < t.K; ++k) {
        const double a = t.trans_a ? o.a[size_t(k) * o.lda + i] : o.a[size_t(i) * o.lda + k];
        const double b = t.trans_b ? o.b[size_t(j) * o.ldb + k] : o.b[size_t(k) * o.ldb + j];
        sum += a * b;
        sum_abs += std::fabs(a * b);
      }
      double& cij = c[size_t(i) * o.ldc + j];
      const double old = beta == 0 ? 0.0 : beta * cij;
      const double bias = with_bias ? o.bias[j] : 0.0;
      bound[size_t(i) * o.ldc + j] =
          (t.K + 3) * eps * (std::fabs(alpha) * sum_abs + std::fabs(old) + std::fabs(bias));
      cij = alpha * sum + old + bias;
    }
  }
  return c;
}

// Checks C[0:M, 0:N] against the reference and that the padding columns were not touched.
void expect_product(const Case& t, const Operands& o, const std::vector<float>& got,
                    const std::vector<double>& want, const std::vector<double>& bound,
                    const std::string& what) {
  for (int i = 0; i < t.M; ++i) {
    for (int j = 0; j < o.ldc; ++j) {
      const size_t at = size_t(i) * o.ldc + j;
      if (j >= t.N) {
        ASSERT_EQ(got[at], o.c[at]) << what << ": padding column " << j << " was written";
      } else {
        ASSERT_NEAR(got[at], want[at], bound[at]) << what << " at (" << i << ", " << j << ")";
      }
    }
  }
}

const Case kCases[] = {
    {false, false, 6, 16, 8},     // one register block (6 x 16)
    {false, false, 12, 32, 8},    // one register block (12 x 32)
    {true, true, 25, 65, 9},      // edges past two 12 x 32 blocks
    {false, true, 64, 256, 64},   // attention's S = q k^T
    {true, false, 192, 64, 64},   // attention's dk += dS^T q
    {true, true, 13, 37, 5},      // every edge
    {false, true, 77, 33, 600},   // K over three depth blocks
    {true, false, 150, 20, 257},  // rows over three row blocks
    {false, false, 7, 4100, 3},   // N over two column blocks
    {false, true, 200, 96, 300},  // large enough to run on several threads
    {false, false, 1, 1, 1},
};

std::string name(const Case& t, float beta, bool bias, const char* kernel) {
  return std::string(kernel) + " " + (t.trans_a ? "T" : "N") + (t.trans_b ? "T" : "N") + " " +
         std::to_string(t.M) + "x" + std::to_string(t.N) + "x" + std::to_string(t.K) + " beta " +
         std::to_string(beta) + (bias ? " bias" : "");
}

TEST(Sgemm, MatchesFloat64ProductOnBothKernels) {
  for (const bool openblas : {false, true}) {
    sgemm_force_openblas(openblas);
    const char* kernel = sgemm_kernel();
    for (const Case& t : kCases) {
      std::mt19937 rng(t.M * 7919 + t.N * 31 + t.K);
      for (const float beta : {0.0f, 1.0f, -0.5f}) {
        for (const bool bias : {false, true}) {
          const Operands o = make(t, t.K, t.N, rng);
          std::vector<float> c = o.c;
          if (beta == 0.0f) {  // beta 0 must not read C
            for (int i = 0; i < t.M; ++i)
              for (int j = 0; j < t.N; ++j) c[size_t(i) * o.ldc + j] = std::nanf("");
          }
          const float alpha = 0.75f;
          std::vector<double> bound;
          const std::vector<double> want = reference(t, o, alpha, beta, bias, bound);
          sgemm(t.trans_a, t.trans_b, t.M, t.N, t.K, alpha, o.a.data(), o.lda, o.b.data(), o.ldb,
                beta, c.data(), o.ldc, bias ? o.bias.data() : nullptr);
          expect_product(t, o, c, want, bound, name(t, beta, bias, kernel));
        }
      }
    }
  }
  sgemm_force_openblas(false);
}

// gemm_packed reads a prefix of a B packed bigger than the product (as panels, and as the
// view kept where sgemm runs on OpenBLAS).
TEST(Sgemm, PackedBMatchesFloat64ProductOnAPrefix) {
  for (const bool openblas : {false, true}) {
    sgemm_force_openblas(openblas);
    for (const Case& t : kCases) {
      std::mt19937 rng(t.M + t.N + t.K);
      const int packed_K = t.K + 9, packed_N = t.N + 21;
      for (const float beta : {0.0f, 1.0f}) {
        const Operands o = make(t, packed_K, packed_N, rng);
        std::vector<float> c = o.c;
        std::vector<double> bound;
        const std::vector<double> want = reference(t, o, 0.75, beta, false, bound);
        PackedB packed;
        packed.pack(t.trans_b, o.b.data(), o.ldb, packed_K, packed_N);
        gemm_packed(t.trans_a, t.M, t.N, t.K, 0.75f, o.a.data(), o.lda, packed, beta, c.data(),
                    o.ldc);
        expect_product(t, o, c, want, bound, name(t, beta, false, sgemm_kernel()));
      }
    }
  }
  sgemm_force_openblas(false);
}

// A product's top-left corner computed alone gives the same bits as in the whole product:
// each element of C is one chain over k whether its register block is full or an edge
// (alpha != 1 with a bias and beta 0 is where a fused multiply-add would round once less).
TEST(Sgemm, EdgeBlocksRoundAsFullBlocks) {
  if (!sgemm_runs_ours()) GTEST_SKIP() << "OpenBLAS's kernel runs here";
  std::mt19937 rng(11);
  const int M = 48, N = 96, K = 450;
  const std::vector<float> a = random_floats(size_t(M) * K, rng),
                           b = random_floats(size_t(K) * N, rng), bias = random_floats(N, rng);
  for (const float beta : {0.0f, -0.5f}) {
    const std::vector<float> c0 = random_floats(size_t(M) * N, rng);
    std::vector<float> whole = c0;
    sgemm(false, false, M, N, K, -1.3f, a.data(), K, b.data(), N, beta, whole.data(), N,
          bias.data());
    for (const auto [m, n] : {std::pair{5, 7}, std::pair{13, 33}, std::pair{47, 95}}) {
      std::vector<float> corner = c0;
      sgemm(false, false, m, n, K, -1.3f, a.data(), K, b.data(), N, beta, corner.data(), N,
            bias.data());
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          ASSERT_EQ(corner[size_t(i) * N + j], whole[size_t(i) * N + j])
              << m << " x " << n << " corner, beta " << beta << ", at (" << i << ", " << j << ")";
    }
  }
}

#ifdef _OPENMP
// Our kernel on 1, 2, 3 and 4 threads gives the same bits for every transpose, accumulating
// into C with a scaled product and a bias (M splits into uneven chunks of rows, taken by
// whichever thread is free); so does gemm_packed with C's rows split over two calls.
TEST(Sgemm, ThreadCountAndRowSplitDoNotChangeBits) {
  if (!sgemm_runs_ours()) GTEST_SKIP() << "OpenBLAS's kernel runs here";
  std::mt19937 rng(5);
  const int M = 301, N = 70, K = 600;
  const std::vector<float> a = random_floats(size_t(M) * K, rng),
                           b = random_floats(size_t(N) * K, rng),
                           c0 = random_floats(size_t(M) * N, rng), bias = random_floats(N, rng);
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      auto run = [&](int threads) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<float> c = c0;
        sgemm(trans_a, trans_b, M, N, K, 0.3f, a.data(), trans_a ? M : K, b.data(), trans_b ? K : N,
              1.0f, c.data(), N, bias.data());
        omp_set_num_threads(saved);
        return c;
      };
      const std::vector<float> one = run(1);
      for (const int threads : {2, 3, 4})
        EXPECT_EQ(one, run(threads))
            << "trans_a " << trans_a << " trans_b " << trans_b << ", " << threads << " threads";
    }
  }

  PackedB packed;
  packed.pack(true, b.data(), K, K, N);
  std::vector<float> whole = c0, split = c0;
  gemm_packed(false, M, N, K, 0.3f, a.data(), K, packed, 1.0f, whole.data(), N);
  const int top = 37;  // not a multiple of the register block
  gemm_packed(false, top, N, K, 0.3f, a.data(), K, packed, 1.0f, split.data(), N);
  gemm_packed(false, M - top, N, K, 0.3f, a.data() + size_t(top) * K, K, packed, 1.0f,
              split.data() + size_t(top) * N, N);
  EXPECT_EQ(whole, split);
}
#endif

// gemm_packed's causal triangles (attention's): skipping the zeros of a triangular A, or
// the register blocks of C past the wanted line, leaves every wanted entry's bits as the
// full product's. The zeros are signed both ways (softmax backward makes -0 as well), K
// runs past one depth block, and B is read in place (N = 64) or packed (N = 45).
TEST(Sgemm, CausalTrianglesKeepTheFullProductsBits) {
  if (!sgemm_runs_ours()) GTEST_SKIP() << "OpenBLAS's kernel runs here";
  std::mt19937 rng(17);
  for (const Triangle::Kind kind : {Triangle::c_lower, Triangle::a_lower, Triangle::a_upper}) {
    for (const bool trans_a : {false, true}) {
      for (const auto [M, N, K] : {std::tuple{70, 45, 90}, std::tuple{64, 64, 450}}) {
        for (const int diag : {0, 13, 64}) {
          const int lda = trans_a ? M : K;
          std::vector<float> a = random_floats(size_t(M) * K, rng);
          const auto zero = [&](int i, int k) {
            return (kind == Triangle::a_lower && k > i + diag) ||
                   (kind == Triangle::a_upper && k < i - diag);
          };
          for (int i = 0; i < M; ++i)
            for (int k = 0; k < K; ++k)
              if (zero(i, k))
                (trans_a ? a[size_t(k) * lda + i] : a[size_t(i) * lda + k]) =
                    (i + k) % 2 ? 0.0f : -0.0f;
          const std::vector<float> b = random_floats(size_t(K) * N, rng);
          PackedB packed;
          packed.pack(false, b.data(), N, K, N);
          for (const float beta : {0.0f, 1.0f}) {
            const std::vector<float> c0 = random_floats(size_t(M) * N, rng);
            std::vector<float> full = c0, skipped = c0;
            gemm_packed(trans_a, M, N, K, 0.7f, a.data(), lda, packed, beta, full.data(), N);
            // In place or packed, gemm_packed's sums are sgemm's.
            std::vector<float> by_sgemm = c0;
            sgemm(trans_a, false, M, N, K, 0.7f, a.data(), lda, b.data(), N, beta, by_sgemm.data(),
                  N);
            ASSERT_EQ(full, by_sgemm);
            gemm_packed(trans_a, M, N, K, 0.7f, a.data(), lda, packed, beta, skipped.data(), N,
                        {kind, diag});
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) {
                if (kind == Triangle::c_lower && j > i + diag) continue;
                ASSERT_EQ(skipped[size_t(i) * N + j], full[size_t(i) * N + j])
                    << "kind " << kind << (trans_a ? " A^T " : " A ") << M << " x " << N << " x "
                    << K << ", diag " << diag << ", beta " << beta << ", at (" << i << ", " << j
                    << ")";
              }
          }
        }
      }
    }
  }
}

TEST(Sgemm, ZeroDepthIsBetaCPlusBias) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> bias = {10, 20, 30, 40};
  sgemm(false, false, 2, 4, 0, 1.0f, nullptr, 1, nullptr, 4, 1.0f, c.data(), 4, bias.data());
  EXPECT_EQ(c, (std::vector<float>{11, 22, 33, 44, 15, 26, 37, 48}));
  PackedB packed;
  packed.pack(false, nullptr, 4, 0, 4);
  gemm_packed(false, 2, 4, 0, 1.0f, nullptr, 1, packed, 0.0f, c.data(), 4);
  EXPECT_EQ(c, std::vector<float>(8, 0.0f));
}

}  // namespace
}  // namespace ringstep::cpu
