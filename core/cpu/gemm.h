// The CPU ops' matrix product in either precision: sgemm (sgemm.h) for float, Eigen maps
// for double (dgemm under EIGEN_USE_BLAS), the tests' reference precision. Internal to
// core/cpu/.
#pragma once

namespace ringstep::cpu {

// C[M x N] = alpha * op(A) * op(B) + beta * C + bias, with sgemm's contract (sgemm.h).
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc, const T* bias = nullptr);

}  // namespace ringstep::cpu
