#include "core/cpu/gemm.h"

#include "core/cpu/eigen_maps.h"
#include "core/cpu/sgemm.h"

// GCC 12 reports its own _mm512_undefined_* intrinsics (inlined through Eigen's AVX-512
// packets) as maybe-uninitialized; a known false positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>

namespace ringstep::cpu {

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc,
                 const float* bias) {
  sgemm(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* a,
                  int lda, const double* b, int ldb, double beta, double* c, int ldc,
                  const double* bias) {
  if (M <= 0 || N <= 0) return;
  StridedMap<double> cm(c, M, N, Eigen::OuterStride<>(ldc));
  if (beta == 0.0) {
    cm.setZero();
  } else if (beta != 1.0) {
    cm *= beta;
  }
  if (bias != nullptr) cm.rowwise() += Eigen::Map<const Eigen::RowVectorXd>(bias, N);
  if (K <= 0) return;
  // Stored shapes: A is K x M when transposed, B is N x K when transposed.
  const ConstStridedMap<double> am(a, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  const ConstStridedMap<double> bm(b, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (trans_a && trans_b) {
    cm.noalias() += alpha * am.transpose() * bm.transpose();
  } else if (trans_a) {
    cm.noalias() += alpha * am.transpose() * bm;
  } else if (trans_b) {
    cm.noalias() += alpha * am * bm.transpose();
  } else {
    cm.noalias() += alpha * am * bm;
  }
}

}  // namespace ringstep::cpu
