// Checks every CPU op's backward against central finite differences of the scalar
// L = sum(out * R) (random R, so dout = R), in double. Also: backward adds into its outputs,
// float agrees with double, attention against a naive reference and its causal structure,
// softmax-crossentropy against -log softmax computed naively.
//
// Finite-difference tolerance: with eps = 1e-6 the central difference has truncation error
// eps^2/6 |L'''| ~ 1e-13 and rounding error ~ ulp(L)/eps ~ 1e-16 * |L| / 1e-6 ~ 1e-9 for the
// |L| ~ 10 of these shapes, so 1e-6 relative to the largest gradient leaves a wide margin,
// while a wrong or missing term shows up at 1e-2 or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/cpu/ops.h"

namespace ringstep::cpu {
namespace {

using Vec = std::vector<double>;

constexpr double kFdEps = 1e-6;
constexpr double kFdTol = 1e-6;
// Float against double: float rounding (6e-8) grown by sums over tens to hundreds of terms.
constexpr double kFloatTol = 1e-5;

Vec random_vec(size_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int V, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

template <typename To>
std::vector<To> cast(const Vec& v) {
  return std::vector<To>(v.begin(), v.end());
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Central differences of loss() with respect to x[0], x[step], x[2 step], ... (x is restored).
Vec numeric_grad(Vec& x, const std::function<double()>& loss, size_t step = 1) {
  Vec g;
  for (size_t i = 0; i < x.size(); i += step) {
    const double xi = x[i];
    x[i] = xi + kFdEps;
    const double lp = loss();
    x[i] = xi - kFdEps;
    const double lm = loss();
    x[i] = xi;
    g.push_back((lp - lm) / (2 * kFdEps));
  }
  return g;
}

// v[0], v[step], v[2 step], ...: the entries numeric_grad(x, loss, step) checks.
Vec every(const Vec& v, size_t step) {
  Vec out;
  for (size_t i = 0; i < v.size(); i += step) out.push_back(v[i]);
  return out;
}

// |actual - expected| <= rtol * max|expected| everywhere; reports the worst entry.
template <typename A>
void expect_close(const std::vector<A>& actual, const Vec& expected, double rtol,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const double scale = std::max(max_abs(expected), 1e-30);
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(double(actual[i]) - expected[i]);
    if (!(err <= worst)) worst = err, worst_i = i;  // also catches NaN
  }
  EXPECT_LE(worst, rtol * scale) << what << ": worst at [" << worst_i << "] "
                                 << double(actual[worst_i]) << " vs " << expected[worst_i]
                                 << " (max |expected| " << scale << ")";
}

// BACKWARD called again over NaN in WRITTEN gives the same values there (it never reads them)
// and doubles the ACCUMULATED gradients.
void expect_writes_and_accumulates(const std::vector<Vec*>& written,
                                   const std::vector<Vec*>& accumulated,
                                   const std::function<void()>& backward) {
  std::vector<Vec> want;
  for (Vec* w : written) {
    want.push_back(*w);
    std::fill(w->begin(), w->end(), std::numeric_limits<double>::quiet_NaN());
  }
  std::vector<Vec> twice;
  for (const Vec* g : accumulated) {
    twice.push_back(*g);
    for (double& x : twice.back()) x *= 2;
  }
  backward();
  for (size_t i = 0; i < written.size(); ++i)
    expect_close(*written[i], want[i], 0.0, "written grad " + std::to_string(i));
  for (size_t i = 0; i < accumulated.size(); ++i)
    expect_close(*accumulated[i], twice[i], 1e-12, "accumulated grad " + std::to_string(i));
}

// Backward has already run once into *grads from zero; running it again must double them.
void expect_accumulates(const std::vector<Vec*>& grads, const std::function<void()>& backward) {
  std::vector<Vec> twice;
  for (const Vec* g : grads) {
    twice.push_back(*g);
    for (double& x : twice.back()) x *= 2;
  }
  backward();
  for (size_t i = 0; i < grads.size(); ++i) {
    expect_close(*grads[i], twice[i], 1e-12, "accumulated grad " + std::to_string(i));
  }
}

struct Shape {
  int B, Tt, C, NH, V;
  int N() const { return B * Tt; }
};
constexpr Shape kSmall{2, 5, 8, 2, 11};
// Uneven: Tt spans two full 64-row query blocks and a 2-row remainder, hs = 4.
constexpr Shape kUneven{1, 130, 12, 3, 13};

// ---------------------------------------------------------------------------- encoder

void check_encoder(const Shape& s, std::mt19937& rng) {
  const int N = s.N(), C = s.C;
  std::vector<int32_t> tokens = random_tokens(N, s.V, rng);
  tokens[N - 1] = tokens[0];  // a repeated token must scatter-add twice
  Vec wte = random_vec(size_t(s.V) * C, rng), wpe = random_vec(size_t(s.Tt) * C, rng);
  const Vec R = random_vec(size_t(N) * C, rng);
  Vec out(R.size());
  auto loss = [&] {
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.Tt, C);
    return dot(out, R);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  auto backward = [&] {
    encoder_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), s.B, s.Tt, C);
  };
  backward();
  expect_close(dwte, numeric_grad(wte, loss), kFdTol, "dwte");
  expect_close(dwpe, numeric_grad(wpe, loss), kFdTol, "dwpe");
  expect_accumulates({&dwte, &dwpe}, backward);
}

TEST(Ops, EncoderBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  check_encoder(kSmall, rng);
  check_encoder(kUneven, rng);
}

// -------------------------------------------------------------------------- layernorm

void check_layernorm(const Shape& s, std::mt19937& rng) {
  const int N = s.N(), C = s.C;
  Vec inp = random_vec(size_t(N) * C, rng, -2.0, 3.0);
  Vec weight = random_vec(C, rng, 0.5, 1.5), bias = random_vec(C, rng);
  const Vec R = random_vec(inp.size(), rng);
  Vec out(inp.size()), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(),
                      N, C);
    return dot(out, R);
  };
  loss();
  const Vec saved_mean = mean, saved_rstd = rstd;
  Vec dinp(inp.size()), dweight(C), dbias(C);
  auto backward = [&] {
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(),
                       weight.data(), saved_mean.data(), saved_rstd.data(), N, C);
  };
  backward();
  expect_close(dinp, numeric_grad(inp, loss), kFdTol, "dinp");
  expect_close(dweight, numeric_grad(weight, loss), kFdTol, "dweight");
  expect_close(dbias, numeric_grad(bias, loss), kFdTol, "dbias");
  expect_accumulates({&dinp, &dweight, &dbias}, backward);
}

TEST(Ops, LayerNormBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(2);
  check_layernorm(kSmall, rng);
  check_layernorm(kUneven, rng);
}

TEST(Ops, LayerNormForwardNormalizesRows) {
  std::mt19937 rng(3);
  const int N = 7, C = 33;
  const Vec inp = random_vec(size_t(N) * C, rng, 10.0, 12.0);  // large offset, small spread
  const Vec ones(C, 1.0), zeros(C, 0.0);
  Vec out(inp.size()), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), zeros.data(), N,
                    C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0 - 1e-5 * rstd[n] * rstd[n], 1e-12);  // var / (var + eps)
  }
}

// ----------------------------------------------------------------------------- matmul

void check_matmul(int N, int C, int OC, std::mt19937& rng) {
  Vec inp = random_vec(size_t(N) * C, rng), weight = random_vec(size_t(OC) * C, rng),
      bias = random_vec(OC, rng);
  const Vec R = random_vec(size_t(N) * OC, rng);
  Vec out(R.size());
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return dot(out, R);
  };
  loss();
  Vec expected(out.size());
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double acc = bias[o];
      for (int c = 0; c < C; ++c) acc += inp[n * C + c] * weight[o * C + c];
      expected[n * OC + o] = acc;
    }
  }
  expect_close(out, expected, 1e-13, "matmul out");

  Vec dinp(inp.size()), dweight(weight.size()), dbias(OC);
  auto backward = [&] {
    matmul_backward(dinp.data(), dweight.data(), dbias.data(), R.data(), inp.data(), weight.data(),
                    N, C, OC);
  };
  backward();
  expect_close(dinp, numeric_grad(inp, loss), kFdTol, "dinp");
  expect_close(dweight, numeric_grad(weight, loss), kFdTol, "dweight");
  expect_close(dbias, numeric_grad(bias, loss), kFdTol, "dbias");
  expect_writes_and_accumulates({&dinp}, {&dweight, &dbias}, backward);

  // Optional outputs: no bias in forward, no dinp/dbias in backward.
  Vec out_nobias(out.size());
  matmul_forward(out_nobias.data(), inp.data(), weight.data(), static_cast<const double*>(nullptr),
                 N, C, OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) expected[n * OC + o] -= bias[o];
  }
  expect_close(out_nobias, expected, 1e-13, "matmul out without bias");
  Vec dweight_only(weight.size());
  matmul_backward(static_cast<double*>(nullptr), dweight_only.data(), static_cast<double*>(nullptr),
                  R.data(), inp.data(), weight.data(), N, C, OC);
  for (double& x : dweight) x /= 2;  // undo the accumulation check
  expect_close(dweight_only, dweight, 1e-13, "dweight without dinp/dbias");
}

TEST(Ops, MatmulBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(4);
  check_matmul(kSmall.N(), kSmall.C, 3 * kSmall.C, rng);
  check_matmul(37, 19, 23, rng);  // large enough for the BLAS path, odd sizes
}

// -------------------------------------------------------------------------- attention

// Naive causal attention in double, straight from the formula.
void naive_attention(Vec& out, Vec& att, const Vec& qkv, const Shape& s) {
  const int Tt = s.Tt, C = s.C, NH = s.NH, hs = C / NH;
  const double scale = 1.0 / std::sqrt(double(hs));
  out.assign(size_t(s.N()) * C, 0.0);
  att.assign(size_t(s.B) * NH * Tt * Tt, 0.0);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < Tt; ++t) {
        const double* q = &qkv[(size_t(b) * Tt + t) * 3 * C + h * hs];
        double* p = &att[((size_t(b) * NH + h) * Tt + t) * Tt];
        double zmax = -1e300, sum = 0.0;
        for (int j = 0; j <= t; ++j) {
          const double* k = &qkv[(size_t(b) * Tt + j) * 3 * C + C + h * hs];
          double d = 0.0;
          for (int i = 0; i < hs; ++i) d += q[i] * k[i];
          p[j] = d * scale;
          zmax = std::max(zmax, p[j]);
        }
        for (int j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - zmax));
        for (int j = 0; j <= t; ++j) p[j] /= sum;
        for (int j = 0; j <= t; ++j) {
          const double* v = &qkv[(size_t(b) * Tt + j) * 3 * C + 2 * C + h * hs];
          for (int i = 0; i < hs; ++i) out[(size_t(b) * Tt + t) * C + h * hs + i] += p[j] * v[i];
        }
      }
    }
  }
}

// fd_step > 1 samples every fd_step-th entry of qkv (coprime with 3C, so every channel of
// every token block is still visited) to keep the long sequence cheap.
void check_attention(const Shape& s, size_t fd_step, std::mt19937& rng) {
  const int Tt = s.Tt, C = s.C, NH = s.NH;
  Vec qkv = random_vec(size_t(s.N()) * 3 * C, rng, -2.0, 2.0);
  const Vec R = random_vec(size_t(s.N()) * C, rng);
  Vec out(R.size()), att(size_t(s.B) * NH * Tt * Tt);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), s.B, Tt, C, NH);
    return dot(out, R);
  };
  loss();
  Vec ref_out, ref_att;
  naive_attention(ref_out, ref_att, qkv, s);
  expect_close(out, ref_out, 1e-13, "attention out");
  expect_close(att, ref_att, 1e-13, "attention att");

  const Vec saved_att = att;
  Vec dqkv(qkv.size());
  auto backward = [&] {
    attention_backward(dqkv.data(), R.data(), qkv.data(), saved_att.data(), s.B, Tt, C, NH);
  };
  backward();
  expect_close(every(dqkv, fd_step), numeric_grad(qkv, loss, fd_step), kFdTol, "dqkv");
  expect_accumulates({&dqkv}, backward);
}

TEST(Ops, AttentionBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  check_attention(kSmall, 1, rng);
  check_attention(kUneven, 7, rng);
}

TEST(Ops, AttentionRowsAreCausalDistributions) {
  std::mt19937 rng(6);
  const Shape s = kUneven;
  const int Tt = s.Tt;
  const Vec qkv = random_vec(size_t(s.N()) * 3 * s.C, rng, -3.0, 3.0);
  Vec out(size_t(s.N()) * s.C), att(size_t(s.B) * s.NH * Tt * Tt, -1.0);
  attention_forward(out.data(), att.data(), qkv.data(), s.B, Tt, s.C, s.NH);
  for (int row = 0; row < s.B * s.NH * Tt; ++row) {
    const int t = row % Tt;
    const double* p = &att[size_t(row) * Tt];
    double sum = 0.0;
    for (int j = 0; j <= t; ++j) {
      EXPECT_GT(p[j], 0.0);
      sum += p[j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14) << "row " << row;
    for (int j = t + 1; j < Tt; ++j) ASSERT_EQ(p[j], 0.0) << "row " << row << " key " << j;
  }
}

TEST(Ops, AttentionOutputIgnoresFutureTokens) {
  std::mt19937 rng(7);
  const Shape s = kUneven;
  const int Tt = s.Tt, C = s.C;
  Vec qkv = random_vec(size_t(s.N()) * 3 * C, rng);
  Vec out(size_t(s.N()) * C), att(size_t(s.B) * s.NH * Tt * Tt);
  attention_forward(out.data(), att.data(), qkv.data(), s.B, Tt, C, s.NH);
  const Vec before = out;
  // Change k and v (not q) of token `future`, inside the same 64-row query block as
  // earlier tokens and in a later block.
  for (int future : {40, 100}) {
    Vec changed = qkv;
    for (int c = C; c < 3 * C; ++c) changed[size_t(future) * 3 * C + c] += 5.0;
    attention_forward(out.data(), att.data(), changed.data(), s.B, Tt, C, s.NH);
    for (size_t i = 0; i < size_t(future) * C; ++i) {
      ASSERT_EQ(out[i], before[i]) << "token " << i / C << " saw token " << future;
    }
    bool later_changed = false;
    for (size_t i = size_t(future) * C; i < out.size(); ++i) later_changed |= out[i] != before[i];
    EXPECT_TRUE(later_changed);
  }
}

// ------------------------------------------------------------------- gelu and residual

TEST(Ops, GeluBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(8);
  const size_t n = 1100;  // a full chunk and a partial one
  Vec inp = random_vec(n, rng, -5.0, 5.0);
  const Vec R = random_vec(n, rng);
  Vec out(n);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(out, R);
  };
  loss();
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    ASSERT_NEAR(out[i], want, 1e-15) << i;
  }
  Vec dinp(n);
  auto backward = [&] { gelu_backward(dinp.data(), inp.data(), R.data(), n); };
  backward();
  expect_close(dinp, numeric_grad(inp, loss), kFdTol, "gelu dinp");
  expect_accumulates({&dinp}, backward);
}

// The in-place form gives exactly the values the accumulating form adds into zeros (the model
// relies on this to share one buffer between dGELU and dfc), on a length with a tail.
TEST(Ops, GeluBackwardInPlaceEqualsAccumulateIntoZeros) {
  const size_t n = 3000;
  std::vector<float> x(n), dy(n);
  std::mt19937 gen(4);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (size_t i = 0; i < n; ++i) {
    x[i] = nd(gen);
    dy[i] = nd(gen);
  }
  std::vector<float> acc(n, 0.f), inplace = dy;
  gelu_backward(acc.data(), x.data(), dy.data(), n);
  gelu_backward_inplace(inplace.data(), x.data(), n);
  // Equal as values (0 + -0 is +0, so memcmp could differ on signed zeros only).
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], inplace[i]) << i;
}

TEST(Ops, GeluFloatIsFiniteInTheTails) {
  const std::vector<float> inp = {-1e4f, -100.f, -20.f, -9.f, 9.f, 20.f, 100.f, 1e4f};
  const std::vector<float> ones(inp.size(), 1.f);
  std::vector<float> out(inp.size()), dinp(inp.size());
  gelu_forward(out.data(), inp.data(), inp.size());
  gelu_backward(dinp.data(), inp.data(), ones.data(), inp.size());
  for (size_t i = 0; i < inp.size(); ++i) {
    const bool positive = inp[i] > 0;
    EXPECT_NEAR(out[i], positive ? inp[i] : 0.f, 1e-6f * std::abs(inp[i])) << inp[i];
    EXPECT_NEAR(dinp[i], positive ? 1.f : 0.f, 1e-6f) << inp[i];
  }
}

TEST(Ops, ResidualBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(9);
  const size_t n = 1500;
  Vec a = random_vec(n, rng), b = random_vec(n, rng);
  const Vec R = random_vec(n, rng);
  Vec out(n);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), n);
    return dot(out, R);
  };
  Vec da(n), db(n);
  auto backward = [&] { residual_backward(da.data(), db.data(), R.data(), n); };
  backward();
  expect_close(da, numeric_grad(a, loss), kFdTol, "da");
  expect_close(db, numeric_grad(b, loss), kFdTol, "db");
  expect_accumulates({&da, &db}, backward);

  // The model writes the sum over one of its inputs.
  Vec sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  residual_forward(b.data(), a.data(), b.data(), n);
  EXPECT_EQ(b, sum);
}

// ---------------------------------------------------------------- softmax + cross-entropy

void check_softmax_crossentropy(int N, int V, double logit_offset, std::mt19937& rng) {
  Vec logits = random_vec(size_t(N) * V, rng, -4.0, 4.0);
  for (double& z : logits) z += logit_offset;
  const std::vector<int32_t> targets = random_tokens(N, V, rng);
  Vec losses(N), probs(logits.size());
  auto mean_loss = [&] {
    softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    double m = 0.0;
    for (double l : losses) m += l / N;
    return m;
  };
  mean_loss();
  Vec ref_losses(N), ref_probs(probs.size());
  for (int n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - logit_offset);
    for (int v = 0; v < V; ++v)
      ref_probs[n * V + v] = std::exp(logits[n * V + v] - logit_offset) / sum;
    ref_losses[n] = -std::log(ref_probs[n * V + targets[n]]);
  }
  expect_close(losses, ref_losses, 1e-13, "losses");
  expect_close(probs, ref_probs, 1e-13, "probs");

  const Vec saved_probs = probs;
  Vec dlogits(logits.size());
  auto backward = [&] {
    softmax_crossentropy_backward(dlogits.data(), saved_probs.data(), targets.data(), 1.0 / N, N,
                                  V);
  };
  backward();
  expect_close(dlogits, numeric_grad(logits, mean_loss), kFdTol, "dlogits");
  expect_writes_and_accumulates({&dlogits}, {}, backward);
}

TEST(Ops, SoftmaxCrossEntropyMatchesNaiveAndFiniteDifferences) {
  std::mt19937 rng(10);
  check_softmax_crossentropy(kSmall.N(), kSmall.V, 0.0, rng);
  check_softmax_crossentropy(kUneven.N(), kUneven.V, 0.0, rng);
  check_softmax_crossentropy(9, 300, 800.0, rng);  // exp(800) overflows without the max shift
}

// --------------------------------------------------------------------- float vs double

// Every forward in float against the same forward in double, on one medium shape, and
// attention's backward (in float its products run on packed panels, panel_gemm.h).
TEST(Ops, FloatMatchesDouble) {
  std::mt19937 rng(11);
  const Shape s{2, 70, 48, 4, 50};
  const int N = s.N(), C = s.C;
  const Vec x = random_vec(size_t(N) * C, rng), w = random_vec(C, rng, 0.5, 1.5),
            bias = random_vec(C, rng), W = random_vec(size_t(3 * C) * C, rng, -0.2, 0.2),
            Wb = random_vec(3 * C, rng), qkv = random_vec(size_t(N) * 3 * C, rng, -2.0, 2.0),
            wte = random_vec(size_t(s.V) * C, rng), wpe = random_vec(size_t(s.Tt) * C, rng),
            logits = random_vec(size_t(N) * s.V, rng, -5.0, 5.0);
  const std::vector<int32_t> tokens = random_tokens(N, s.V, rng);

  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xf = cast<T>(x), wf = cast<T>(w), bf = cast<T>(bias), Wf = cast<T>(W),
               Wbf = cast<T>(Wb), qkvf = cast<T>(qkv), wtef = cast<T>(wte), wpef = cast<T>(wpe),
               logitsf = cast<T>(logits);
    std::vector<std::vector<T>> outs;
    std::vector<T> o(size_t(N) * C), mean(N), rstd(N);
    encoder_forward(o.data(), tokens.data(), wtef.data(), wpef.data(), s.B, s.Tt, C);
    outs.push_back(o);
    layernorm_forward(o.data(), mean.data(), rstd.data(), xf.data(), wf.data(), bf.data(), N, C);
    outs.push_back(o);
    std::vector<T> mm(size_t(N) * 3 * C);
    matmul_forward(mm.data(), xf.data(), Wf.data(), Wbf.data(), N, C, 3 * C);
    outs.push_back(mm);
    std::vector<T> att(size_t(s.B) * s.NH * s.Tt * s.Tt);
    attention_forward(o.data(), att.data(), qkvf.data(), s.B, s.Tt, C, s.NH);
    outs.push_back(o);
    outs.push_back(att);
    std::vector<T> dqkv(qkvf.size(), T(0));
    attention_backward(dqkv.data(), xf.data(), qkvf.data(), att.data(), s.B, s.Tt, C, s.NH);
    outs.push_back(dqkv);
    gelu_forward(o.data(), xf.data(), o.size());
    outs.push_back(o);
    std::vector<T> losses(N), probs(size_t(N) * s.V);
    softmax_crossentropy_forward(losses.data(), probs.data(), logitsf.data(), tokens.data(), N,
                                 s.V);
    outs.push_back(losses);
    outs.push_back(probs);
    return outs;
  };
  const auto f = run(0.0f);
  const auto d = run(0.0);
  const char* names[] = {"encoder",        "layernorm", "matmul", "attention out", "attention att",
                         "attention dqkv", "gelu",      "losses", "probs"};
  ASSERT_EQ(f.size(), d.size());
  for (size_t i = 0; i < f.size(); ++i) expect_close(f[i], d[i], kFloatTol, names[i]);
}

// ------------------------------------------------------------------------ threads

#ifdef _OPENMP
// Row-parallel ops and per-head attention write disjoint memory, so the thread count must
// not change a single bit.
TEST(Ops, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(12);
  const Shape s{2, 96, 64, 4, 64};
  const int N = s.N(), C = s.C;
  const auto qkv = cast<float>(random_vec(size_t(N) * 3 * C, rng, -2.0, 2.0));
  const auto dout = cast<float>(random_vec(size_t(N) * C, rng));
  const auto x = cast<float>(random_vec(size_t(N) * 4 * C, rng, -3.0, 3.0));
  const auto w = cast<float>(random_vec(4 * C, rng)), b = cast<float>(random_vec(4 * C, rng));
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(size_t(N) * C), att(size_t(s.B) * s.NH * s.Tt * s.Tt), dqkv(qkv.size()),
        ln(x.size()), mean(N), rstd(N), g(x.size()), dg(x.size());
    attention_forward(out.data(), att.data(), qkv.data(), s.B, s.Tt, C, s.NH);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.Tt, C, s.NH);
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, 4 * C);
    gelu_forward(g.data(), x.data(), x.size());
    gelu_backward(dg.data(), x.data(), ln.data(), x.size());
    // The row reductions split columns across threads: gradients at offsets that are not
    // 64-byte aligned, and a width that is no multiple of the column grain.
    const int W = 4 * C - 3;
    std::vector<float> dln(x.size()), dparams(3 * W + 5, 0.5f);
    float* dw = dparams.data() + 1;
    float* db = dw + W + 1;
    float* dbias = db + W + 1;
    layernorm_backward(dln.data(), dw, db, g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                       N, W);
    std::vector<float> dweight(W);  // a product: not compared (the BLAS may split it)
    matmul_backward<float>(nullptr, dweight.data(), dbias, x.data(), ln.data(), w.data(), N, 1, W);
    omp_set_num_threads(saved);
    return std::vector<std::vector<float>>{out, att, dqkv, ln, g, dg, dln, dparams};
  };
  const auto one = run(1);
  for (int threads : {2, 3, 4}) EXPECT_EQ(one, run(threads)) << threads << " threads";
}
#endif

}  // namespace
}  // namespace ringstep::cpu
