// comm/device_sign_allreduce.h on 2, 3 and 4 ranks, with the kernels' CPU twins
// (comm/sign_twins.h) on host memory over the host fake of the device's comm stream
// (tests/train/fake_device_comm.h: the same grouped point-to-point transfers, over MPI):
// call after call it leaves SignAllreduce's bits (encode, exchange, decode over MPI) in the
// output and in both error buffers, sends the same bytes, and gives every rank the same
// output; for counts that need padding and counts that do not, one segment and many
// (segments across chunk edges, a single-element one, an empty one, scale blocks).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/device_sign_allreduce.h"
#include "comm/sign_allreduce.h"
#include "comm/sign_allreduce_reference.h"
#include "comm/sign_twins.h"
#include "core/runtime.h"
#include "mpi/mpitest_main.h"
#include "mpi/mpitest_util.h"
#include "train/fake_device_comm.h"

namespace ringstep {
namespace {

using testing::world;

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) wrong += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return wrong;
}

void ExpectSignAllreducesBits(testing::FakeDeviceComm& device, size_t count,
                              const std::vector<size_t>& ends, OneBitScale kind, int calls) {
  auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  HostSignKernels twins;
  DeviceSignAllreduce on_device(count, ends, n, r, kind, runtime(Device::cpu), twins);
  SignAllreduce reference(count, ends, n, r, kind);
  std::vector<float> ew(count, 0.0f), es(count, 0.0f), ref_ew = ew, ref_es = es;
  for (int c = 0; c < calls; ++c) {
    std::vector<float> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = testing::sign_input(r, i, c);
    std::vector<float> ref_x = x;
    const SignAllreduceStats ref = reference.encode(ref_x.data(), ref_ew.data());
    reference.exchange(comm, ref_es.data(), kSignAllreduceTag);
    reference.decode(ref_x.data());
    const SignAllreduceStats got = on_device.run(device, x.data(), ew.data(), es.data());
    device.compute_waits_for_comm();
    device.poll_errors();
    EXPECT_EQ(got.bytes_sent, ref.bytes_sent);
    EXPECT_EQ(got.bytes_sent, sign_allreduce_bytes(count, ends, n));
    ASSERT_EQ(differing(x, ref_x), 0u) << "output, call " << c;
    ASSERT_EQ(differing(ew, ref_ew), 0u) << "worker error, call " << c;
    ASSERT_EQ(differing(es, ref_es), 0u) << "server error, call " << c;
  }
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = testing::sign_input(r, i, calls);
  on_device.run(device, x.data(), ew.data(), es.data());
  device.compute_waits_for_comm();
  EXPECT_TRUE(testing::identical_on_all_ranks(comm, x.data(), count * sizeof(float)));
}

TEST(DeviceSignAllreduce, TwinsOverTheFakeGiveSignAllreducesBits) {
  testing::FakeDeviceComm device;
  const size_t q = 8 * size_t(world().size());
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    for (size_t count : {size_t(1), size_t(5), q, 37 * q + 3, size_t(4099), kScaleRun + 29}) {
      SCOPED_TRACE(::testing::Message() << "count " << count << " scale " << name(kind));
      ExpectSignAllreducesBits(device, count, {}, kind, 4);
      if (count < 5) continue;
      ExpectSignAllreducesBits(device, count, {count / 3, count / 3 + 1, count / 3 + 1, count},
                               kind, 4);
      ExpectSignAllreducesBits(device, count, split_segments({count / 3, count}, count, 24), kind,
                               4);
    }
  }
}

// A vector of several scale runs in one segment, and a segment of several runs next to
// short ones: the runs' sums are added in order on both sides.
TEST(DeviceSignAllreduce, LongSegmentsSumTheirRunsInOrder) {
  testing::FakeDeviceComm device;
  const size_t count = 3 * kScaleRun + 1001;
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    SCOPED_TRACE(name(kind));
    ExpectSignAllreducesBits(device, count, {}, kind, 2);
    ExpectSignAllreducesBits(device, count, {17, 2 * kScaleRun + 5, count}, kind, 2);
  }
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
