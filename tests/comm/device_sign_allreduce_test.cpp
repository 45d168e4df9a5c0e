// comm/device_sign_allreduce.h's stages with the kernels' CPU twins (comm/sign_twins.h), N
// ranks simulated in one process (tests/comm/device_sign_sim.h), against the reference
// simulation of comm/sign_allreduce.h's math (tests/comm/sign_allreduce_reference.h), bit
// for bit, call after call: every rank's output, worker error and server error, for 1 to 4
// ranks, counts that pad and counts that do not, several scale runs, one segment and many
// (across chunk edges, a single element, an empty one).
#include "comm/device_sign_allreduce.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/device_sign_sim.h"
#include "comm/sign_allreduce_reference.h"
#include "comm/sign_twins.h"

namespace ringstep {
namespace {

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) wrong += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return wrong;
}

void ExpectMatchesReference(int n, size_t count, const std::vector<size_t>& ends,
                            OneBitScale kind) {
  HostSignKernels twins;
  testing::DeviceSignSim device(n, count, ends, kind, runtime(Device::cpu), twins);
  testing::SignSim sim(n, count, ends);
  for (int c = 0; c < 4; ++c) {
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) sim.x[r][i] = testing::sign_input(r, i, c);
    const std::vector<std::vector<float>> out = device.step(sim.x);
    sim.step(kind);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(differing(out[r], sim.x[r]), 0u) << "output of rank " << r << ", call " << c;
      ASSERT_EQ(differing(device.worker_error(r), sim.worker_error[r]), 0u)
          << "worker error of rank " << r << ", call " << c;
      ASSERT_EQ(differing(device.server_error(r), sim.server_error[r]), 0u)
          << "server error of rank " << r << ", call " << c;
    }
  }
}

TEST(DeviceSignAllreduce, TwinsMatchTheReferenceSimulation) {
  for (int n = 1; n <= 4; ++n) {
    const size_t q = 8 * size_t(n);
    for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
      for (size_t count : {size_t(1), size_t(5), q, 37 * q + 3, kScaleRun + 29}) {
        SCOPED_TRACE(::testing::Message()
                     << n << " ranks, count " << count << ", scale " << name(kind));
        ExpectMatchesReference(n, count, {}, kind);
        if (count < 5) continue;
        ExpectMatchesReference(n, count, {count / 3, count / 3 + 1, count / 3 + 1, count}, kind);
        ExpectMatchesReference(n, count, split_segments({count / 3, count}, count, 24), kind);
      }
    }
  }
}

TEST(DeviceSignAllreduce, SeveralRunsPerSegmentMatchTheReference) {
  const size_t count = 3 * kScaleRun + 1001;
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2})
    ExpectMatchesReference(3, count, {17, 2 * kScaleRun + 5, count}, kind);
}

}  // namespace
}  // namespace ringstep
