#include "core/cuda/gemm_plan.h"

#include <stdexcept>

#include "core/cpu/ops.h"

namespace ringstep::cuda {
namespace {

// Stored dimensions (rows, cols) of a column-major operand that is op'd to R x S.
size_t span(int64_t rows_stored, int64_t cols_stored, int64_t ld, int batch, int64_t stride) {
  const size_t one = size_t((cols_stored - 1) * ld + rows_stored);
  return size_t(batch - 1) * size_t(stride) + one;
}

GemmPlan make_plan(bool ta, bool tb, int m, int n, int k, int64_t lda, int64_t ldb, int64_t ldc,
                   int batch, int64_t sa, int64_t sb, int64_t sc) {
  GemmPlan p;
  p.trans_a = ta;
  p.trans_b = tb;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.batch = batch;
  p.stride_a = sa;
  p.stride_b = sb;
  p.stride_c = sc;
  return p;
}

}  // namespace

// out^T (OC x N) = W (col-major C x OC, transposed) * inp^T (col-major C x N).
GemmPlan plan_linear_forward(int N, int C, int OC) {
  return make_plan(true, false, OC, N, C, C, C, OC, 1, 0, 0, 0);
}

// dinp^T (C x N) = W^T (col-major C x OC) * dout^T (col-major OC x N).
GemmPlan plan_linear_dinp(int N, int C, int OC) {
  return make_plan(false, false, C, N, OC, C, OC, C, 1, 0, 0, 0);  // beta 0: dinp is written
}

// dweight^T (C x OC) = inp^T (col-major C x N) * dout (col-major OC x N, transposed).
GemmPlan plan_linear_dweight(int N, int C, int OC) {
  GemmPlan p = make_plan(false, true, C, OC, N, C, OC, C, 1, 0, 0, 0);
  p.beta = 1.0f;
  return p;
}

namespace {

// Row I, column J of batch entry B of the plan's product op(A) op(B), in double.
double product_at(const GemmPlan& p, const float* A, const float* B, int b, int i, int j) {
  const float* a = A + int64_t(b) * p.stride_a;
  const float* bb = B + int64_t(b) * p.stride_b;
  double acc = 0.0;
  for (int l = 0; l < p.k; ++l) {
    const float av = p.trans_a ? a[l + i * p.lda] : a[i + l * p.lda];
    const float bv = p.trans_b ? bb[j + l * p.ldb] : bb[l + j * p.ldb];
    acc += double(av) * bv;
  }
  return acc;
}

}  // namespace

void gemm_reference(const GemmPlan& p, const float* A, const float* B, float* C) {
  for (int b = 0; b < p.batch; ++b) {
    float* c = C + int64_t(b) * p.stride_c;
    for (int j = 0; j < p.n; ++j)
      for (int i = 0; i < p.m; ++i) {
        const double prev = p.beta != 0.0f ? double(p.beta) * c[i + j * p.ldc] : 0.0;
        c[i + j * p.ldc] = float(prev + product_at(p, A, B, b, i, j));
      }
  }
}

void gemm_reference(const GemmPlan& p, Epilogue epilogue, const float* A, const float* B, float* C,
                    const float* bias, float* aux) {
  if (epilogue == Epilogue::none) return gemm_reference(p, A, B, C);
  if (p.beta != 0.0f || p.batch != 1)
    throw std::logic_error("gemm_reference: an epilogue writes C of one product (beta 0)");
  for (int j = 0; j < p.n; ++j)
    for (int i = 0; i < p.m; ++i) {
      const int64_t at = i + j * p.ldc;
      double x = product_at(p, A, B, 0, i, j);
      if (epilogue != Epilogue::dgelu) x += bias[i];
      if (epilogue == Epilogue::gelu_aux_bias) {
        aux[at] = float(x);
        cpu::gelu_forward<double>(&x, &x, 1);
      } else if (epilogue == Epilogue::dgelu) {
        const double g = aux[at];
        cpu::gelu_backward_inplace<double>(&x, &g, 1);
      }
      C[at] = float(x);
    }
}

uint32_t operand_alignment(const void* p, int batch, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 64u;
  if (batch > 1) bits |= uint64_t(stride_bytes);
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

GemmKey make_gemm_key(const GemmPlan& p, int ab_type, size_t ab_bytes, int cd_type,
                      size_t cd_bytes, bool tf32, Epilogue epilogue, const void* A, const void* B,
                      const void* C) {
  GemmKey k;
  k.shape = p;
  k.shape.beta = 0.0f;
  k.ab_type = ab_type;
  k.cd_type = cd_type;
  k.tf32 = tf32;
  k.epilogue = epilogue;
  k.align_a = operand_alignment(A, p.batch, p.stride_a * int64_t(ab_bytes));
  k.align_b = operand_alignment(B, p.batch, p.stride_b * int64_t(ab_bytes));
  k.align_c = operand_alignment(C, p.batch, p.stride_c * int64_t(cd_bytes));
  return k;
}

size_t GemmKeyHash::operator()(const GemmKey& k) const noexcept {
  const GemmPlan& s = k.shape;
  const uint64_t fields[] = {uint64_t(s.trans_a) | uint64_t(s.trans_b) << 1 |
                                 uint64_t(k.tf32) << 2 | uint64_t(k.epilogue) << 3,
                             uint64_t(uint32_t(s.m)) | uint64_t(uint32_t(s.n)) << 32,
                             uint64_t(uint32_t(s.k)) | uint64_t(uint32_t(s.batch)) << 32,
                             uint64_t(s.lda), uint64_t(s.ldb), uint64_t(s.ldc),
                             uint64_t(s.stride_a), uint64_t(s.stride_b), uint64_t(s.stride_c),
                             uint64_t(uint32_t(k.ab_type)) | uint64_t(uint32_t(k.cd_type)) << 32,
                             uint64_t(k.align_a) | uint64_t(k.align_b) << 16 |
                                 uint64_t(k.align_c) << 32};
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t f : fields) {  // splitmix64's finaliser over each field in turn
    h ^= f + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return size_t(h);
}

size_t span_a(const GemmPlan& p) {
  return p.trans_a ? span(p.k, p.m, p.lda, p.batch, p.stride_a)
                   : span(p.m, p.k, p.lda, p.batch, p.stride_a);
}
size_t span_b(const GemmPlan& p) {
  return p.trans_b ? span(p.n, p.k, p.ldb, p.batch, p.stride_b)
                   : span(p.k, p.n, p.ldb, p.batch, p.stride_b);
}
size_t span_c(const GemmPlan& p) { return span(p.m, p.n, p.ldc, p.batch, p.stride_c); }

}  // namespace ringstep::cuda
