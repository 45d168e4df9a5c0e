// CPU ops except attention (ops_attention.cpp). Formulas follow llm.c's train_gpt2.c; each
// matrix product is one gemm call on the caller's buffers (gemm.h: sgemm with the bias
// folded into the write of C in float, Eigen/dgemm in double). The other ops make
// one pass over memory per direction (a row of C or V values stays in L1 while it is
// reduced and written), vectorised by Eigen's array expressions, which include vector
// exp and tanh for float.
//
// Determinism: every reduction over rows (dweight, dbias, dwte, dwpe) adds the rows in row
// order, each column on one thread (LayerNorm's and the matmul's split the columns across
// the team), so results do not depend on the thread count; row-parallel loops write
// disjoint rows.
#include "core/cpu/ops.h"

#include "core/cpu/eigen_maps.h"
#include "core/cpu/gemm.h"
#include "core/cpu/team.h"

// GCC 12 reports its own _mm512_undefined_* intrinsics (inlined through Eigen's AVX-512
// packets) as maybe-uninitialized; a known false positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace ringstep::cpu {
namespace {

// Below this many elements an OpenMP fork/join costs about as much as it saves.
constexpr size_t kParallelMinElems = size_t{1} << 15;
// Column shares of the row reductions start at multiples of this many values (one or two
// cache lines).
constexpr size_t kColumnGrain = 16;
// Elementwise ops walk their arrays in chunks that fit in L1 next to their operands.
constexpr size_t kChunk = 1024;

// Calls f(begin, len) on consecutive chunks of [0, n), in parallel when n is large.
template <typename F>
void for_each_chunk(size_t n, F&& f) {
  const std::ptrdiff_t chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElems)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    f(begin, static_cast<Eigen::Index>(std::min(kChunk, n - begin)));
  }
}

}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tt,
                     int C) {
  const int N = B * Tt;
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kParallelMinElems)
  for (int n = 0; n < N; ++n) {
    ArrayMap<T>(out + size_t(n) * C, C) = ConstArrayMap<T>(wte + size_t(tokens[n]) * C, C) +
                                          ConstArrayMap<T>(wpe + size_t(n % Tt) * C, C);
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tt,
                      int C) {
  // Serial: a token may repeat, and the scatter-add must sum in a fixed order.
  for (int n = 0; n < B * Tt; ++n) {
    const ConstArrayMap<T> d(dout + size_t(n) * C, C);
    ArrayMap<T>(dwte + size_t(tokens[n]) * C, C) += d;
    ArrayMap<T>(dwpe + size_t(n % Tt) * C, C) += d;
  }
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
  const ConstArrayMap<T> w(weight, C), b(bias, C);
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kParallelMinElems)
  for (int n = 0; n < N; ++n) {
    const ConstArrayMap<T> x(inp + size_t(n) * C, C);
    // Two-pass variance (mean first, then squared deviations): the row is in L1 and it
    // avoids the cancellation of E[x^2] - E[x]^2.
    const T m = x.mean();
    const T s = T(1) / std::sqrt((x - m).square().mean() + T(1e-5));
    ArrayMap<T>(out + size_t(n) * C, C) = (x - m) * s * w + b;
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward_team(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, const T* mean, const T* rstd, int N, int C) {
  const ConstArrayMap<T> w(weight, C);
  // With xhat = (x - mean) * rstd and g = dout * w:
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Rows are independent.
#pragma omp for schedule(static) nowait
  for (int n = 0; n < N; ++n) {
    const ConstArrayMap<T> x(inp + size_t(n) * C, C), dy(dout + size_t(n) * C, C);
    const auto xhat = (x - mean[n]) * rstd[n];
    const auto g = dy * w;
    const T g_mean = g.mean();
    const T g_xhat_mean = (g * xhat).mean();
    ArrayMap<T>(dinp + size_t(n) * C, C) += (g - g_mean - xhat * g_xhat_mean) * rstd[n];
  }
  // dweight and dbias: this thread's columns, summed over the rows in order.
  const Span cols = team_share(size_t(C), kColumnGrain);
  const Eigen::Index c0 = Eigen::Index(cols.begin), len = Eigen::Index(cols.size());
  if (len == 0) return;
  ArrayMap<T> dw(dweight + c0, len), db(dbias + c0, len);
  for (int n = 0; n < N; ++n) {
    const ConstArrayMap<T> x(inp + size_t(n) * C + c0, len), dy(dout + size_t(n) * C + c0, len);
    db += dy;
    dw += dy * ((x - mean[n]) * rstd[n]);
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
#pragma omp parallel if (size_t(N) * C >= kParallelMinElems)
  layernorm_backward_team(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

template <typename T>
void add_rows_team(T* sum, const T* rows, int N, int C) {
  const Span cols = team_share(size_t(C), kColumnGrain);
  const Eigen::Index c0 = Eigen::Index(cols.begin), len = Eigen::Index(cols.size());
  if (len == 0) return;
  ArrayMap<T> s(sum + c0, len);
  for (int n = 0; n < N; ++n) s += ConstArrayMap<T>(rows + size_t(n) * C + c0, len);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC, bias);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp != nullptr) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(0), dinp, C);
  gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias != nullptr) {
#pragma omp parallel if (size_t(N) * OC >= kParallelMinElems)
    add_rows_team(dbias, dout, N, OC);
  }
}

namespace {
// GELU tanh approximation (Hendrycks & Gimpel 2016): 0.5 x (1 + tanh(u)),
// u = sqrt(2/pi) (x + 0.044715 x^3).
constexpr double kGeluBeta = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluKappa = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n) {
  const T beta = T(kGeluBeta), kappa = T(kGeluKappa);
  for_each_chunk(n, [&](size_t i, Eigen::Index len) {
    const ConstArrayMap<T> x(inp + i, len);
    ArrayMap<T>(out + i, len) = T(0.5) * x * (T(1) + (beta * (x + kappa * x.cube())).tanh());
  });
}

namespace {
// GELU'(x) for one chunk, into DERIV: 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
// du/dx = beta (1 + 3 kappa x^2).
template <typename T>
void gelu_derivative(T* deriv, const T* inp, Eigen::Index len) {
  const T beta = T(kGeluBeta), kappa = T(kGeluKappa);
  const ConstArrayMap<T> x(inp, len);
  ArrayMap<T> d(deriv, len);
  d = (beta * (x + kappa * x.cube())).tanh();  // tanh(u), needed twice
  d = T(0.5) * (T(1) + d) +
      T(0.5) * x * (T(1) - d.square()) * beta * (T(1) + T(3) * kappa * x.square());
}
}  // namespace

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  for_each_chunk(n, [&](size_t i, Eigen::Index len) {
    alignas(64) T deriv[kChunk];
    gelu_derivative(deriv, inp + i, len);
    ArrayMap<T>(dinp + i, len) += ConstArrayMap<T>(dout + i, len) * ConstArrayMap<T>(deriv, len);
  });
}

template <typename T>
void gelu_backward_inplace(T* d, const T* inp, size_t n) {
  for_each_chunk(n, [&](size_t i, Eigen::Index len) {
    alignas(64) T deriv[kChunk];
    gelu_derivative(deriv, inp + i, len);
    ArrayMap<T>(d + i, len) *= ConstArrayMap<T>(deriv, len);
  });
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n) {
  // out may alias a or b: the expression reads and writes the same index only.
  for_each_chunk(n, [&](size_t i, Eigen::Index len) {
    ArrayMap<T>(out + i, len) = ConstArrayMap<T>(a + i, len) + ConstArrayMap<T>(b + i, len);
  });
}

template <typename T>
void residual_backward(T* da, T* db, const T* dout, size_t n) {
  for_each_chunk(n, [&](size_t i, Eigen::Index len) {
    const ConstArrayMap<T> d(dout + i, len);
    ArrayMap<T>(da + i, len) += d;
    ArrayMap<T>(db + i, len) += d;
  });
}

template <typename T>
void softmax_crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                                  int N, int V) {
#pragma omp parallel for schedule(static) if (size_t(N) * V >= kParallelMinElems)
  for (int n = 0; n < N; ++n) {
    const ConstArrayMap<T> z(logits + size_t(n) * V, V);
    ArrayMap<T> p(probs + size_t(n) * V, V);
    const T zmax = z.maxCoeff();
    p = (z - zmax).exp();
    const T sum = p.sum();
    p *= T(1) / sum;
    // -log p[target] written as logsumexp - z[target]: finite even where p underflows to 0.
    losses[n] = std::log(sum) + zmax - z[targets[n]];
  }
}

template <typename T>
void softmax_crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                                   int N, int V) {
#pragma omp parallel for schedule(static) if (size_t(N) * V >= kParallelMinElems)
  for (int n = 0; n < N; ++n) {
    ArrayMap<T>(dlogits + size_t(n) * V, V) = ConstArrayMap<T>(probs + size_t(n) * V, V) * dloss;
    dlogits[size_t(n) * V + targets[n]] -= dloss;
  }
}

#define RINGSTEP_INSTANTIATE_OPS(T)                                                            \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int);     \
  template void encoder_backward<T>(T*, T*, const T*, const int32_t*, int, int, int);          \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);      \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,      \
                                      const T*, int, int);                                     \
  template void layernorm_backward_team<T>(T*, T*, T*, const T*, const T*, const T*, const T*, \
                                           const T*, int, int);                                \
  template void add_rows_team<T>(T*, const T*, int, int);                                      \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);            \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);   \
  template void gelu_forward<T>(T*, const T*, size_t);                                         \
  template void gelu_backward<T>(T*, const T*, const T*, size_t);                              \
  template void gelu_backward_inplace<T>(T*, const T*, size_t);                                \
  template void residual_forward<T>(T*, const T*, const T*, size_t);                           \
  template void residual_backward<T>(T*, T*, const T*, size_t);                                \
  template void softmax_crossentropy_forward<T>(T*, T*, const T*, const int32_t*, int, int);   \
  template void softmax_crossentropy_backward<T>(T*, const T*, const int32_t*, T, int, int);

RINGSTEP_INSTANTIATE_OPS(float)
RINGSTEP_INSTANTIATE_OPS(double)
#undef RINGSTEP_INSTANTIATE_OPS

}  // namespace ringstep::cpu
