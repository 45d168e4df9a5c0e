// The sign code's CUDA kernels (comm/nccl/sign_kernels.h) against their CPU twins
// (comm/sign_twins.h), bit for bit, through the whole exchange of comm/device_sign_allreduce.h
// with 1 to 4 ranks simulated in one process on one GPU (tests/comm/device_sign_sim.h), call
// after call: every rank's output, worker error and server error. The twins are held to
// comm/sign_allreduce.h's code by DeviceSignAllreduce.* in ringstep_tests, so this holds the
// kernels to it too. Skips with the reason when no GPU is usable (or the build has no NCCL,
// whose library holds the kernels).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/device_sign_sim.h"
#include "comm/sign_allreduce.h"
#include "comm/sign_allreduce_reference.h"
#include "comm/sign_twins.h"
#include "core/cuda/cuda_skip.h"
#include "core/runtime.h"

#ifdef RINGSTEP_HAVE_NCCL
#include "comm/nccl/sign_kernels.h"
#endif

namespace ringstep {
namespace {

class SignKernelsCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = ringstep::testing::cuda_skip_reason(); !why.empty())
      GTEST_SKIP() << why;
#ifndef RINGSTEP_HAVE_NCCL
    GTEST_SKIP() << "this build has no NCCL (the sign kernels live in its comm library)";
#endif
  }
};

#ifdef RINGSTEP_HAVE_NCCL

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) wrong += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return wrong;
}

void ExpectKernelsMatchTwins(int n, size_t count, const std::vector<size_t>& ends,
                             OneBitScale kind) {
  nccl::CudaSignKernels kernels;
  HostSignKernels twins;
  testing::DeviceSignSim gpu(n, count, ends, kind, runtime(Device::cuda), kernels);
  testing::DeviceSignSim cpu(n, count, ends, kind, runtime(Device::cpu), twins);
  std::vector<std::vector<float>> x(static_cast<size_t>(n), std::vector<float>(count));
  for (int c = 0; c < 3; ++c) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) x[r][i] = testing::sign_input(r, i, c);
    const std::vector<std::vector<float>> got = gpu.step(x), want = cpu.step(x);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(differing(got[r], want[r]), 0u) << "output of rank " << r << ", call " << c;
      ASSERT_EQ(differing(gpu.worker_error(r), cpu.worker_error(r)), 0u)
          << "worker error of rank " << r << ", call " << c;
      ASSERT_EQ(differing(gpu.server_error(r), cpu.server_error(r)), 0u)
          << "server error of rank " << r << ", call " << c;
    }
  }
}

TEST_F(SignKernelsCuda, ExchangeGivesTheTwinsBits) {
  for (int n = 1; n <= 4; ++n) {
    const size_t count = 2 * kScaleRun + 8 * size_t(n) * 37 + 3;
    for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
      SCOPED_TRACE(::testing::Message() << n << " ranks, scale " << name(kind));
      ExpectKernelsMatchTwins(n, count, {}, kind);
      ExpectKernelsMatchTwins(n, count, {count / 3, count / 3 + 1, count / 3 + 1, count}, kind);
      ExpectKernelsMatchTwins(n, count, split_segments({count / 3, count}, count, 1000), kind);
    }
  }
}

#endif  // RINGSTEP_HAVE_NCCL

}  // namespace
}  // namespace ringstep
