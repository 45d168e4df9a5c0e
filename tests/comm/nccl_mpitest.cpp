// The NCCL communicator (comm/nccl/nccl_comm.h) under mpirun: our device ring against
// ncclAllReduce (bit-identical on integer-valued data, every dtype, counts that do and do
// not divide, one and many sub-chunks) and against the host ring on random data (the same
// reduction order and rounding, so the same bits). Skips without NCCL or a GPU (CI); with
// more ranks than GPUs, NCCL may refuse the duplicate GPU, which the test prints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl/nccl_comm.h"
#include "comm/ring_allreduce.h"
#include "core/dtype.h"
#include "mpi/mpitest_main.h"

#ifdef RINGSTEP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "core/cuda/device.h"
#endif

namespace ringstep {
namespace {

using testing::world;

#ifndef RINGSTEP_HAVE_NCCL
TEST(NcclComm, SkippedWithoutNccl) { GTEST_SKIP() << nccl::unavailable_reason(); }
#else

// Values of DT holding V (exact for the small integers used here).
std::vector<uint8_t> encode(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(dt));
  if (dt == DType::f32)
    std::memcpy(bytes.data(), v.data(), bytes.size());
  else
    narrow_from_fp32(dt, v.data(), reinterpret_cast<uint16_t*>(bytes.data()), v.size());
  return bytes;
}

// Runs FN on a device copy of BYTES and returns the copy's bytes afterwards.
template <class Fn>
std::vector<uint8_t> on_device(const std::vector<uint8_t>& bytes, Fn&& fn) {
  void* d = cuda::device_alloc(bytes.size());
  cuda::copy_to_device(d, bytes.data(), bytes.size());
  fn(d);
  std::vector<uint8_t> out(bytes.size());
  cuda::copy_to_host(out.data(), d, out.size());
  cuda::device_free(d);
  return out;
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = nccl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
    try {
      comm_ = std::make_unique<nccl::NcclComm>(world());
    } catch (const CommError& e) {
      int gpus = 0;
      cudaGetDeviceCount(&gpus);
      // Every rank sees the same refusal, so every rank skips.
      if (world().size() > gpus) GTEST_SKIP() << "NCCL refused " << world().size()
                                              << " ranks on " << gpus << " GPU(s): " << e.what();
      throw;
    }
  }
  std::unique_ptr<nccl::NcclComm> comm_;
};

TEST_F(Nccl, RingEqualsNcclAllReduceOnIntegerValuedData) {
  const int n = world().size(), r = world().rank();
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(1 << 18) + 3})
      for (size_t chunk_bytes : {size_t(0), size_t(4096)}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " count " << count << " chunk "
                                          << chunk_bytes);
        std::vector<float> mine(count), sum(count);
        for (size_t i = 0; i < count; ++i) {
          mine[i] = float((r + 1) * int(i % 7));  // sums stay below 2^8: exact in bf16
          sum[i] = float(n * (n + 1) / 2 * int(i % 7));
        }
        RingOptions opt;
        opt.chunk_bytes = chunk_bytes;
        const auto ring = on_device(encode(mine, dt), [&](void* d) {
          comm_->allreduce_ring(d, count, dt, opt, nullptr);
          comm_->synchronize(nullptr, 60);
        });
        const auto native = on_device(encode(mine, dt), [&](void* d) {
          comm_->allreduce_native(d, count, dt, false, nullptr);
          comm_->synchronize(nullptr, 60);
        });
        EXPECT_EQ(ring, encode(sum, dt));
        EXPECT_EQ(native, encode(sum, dt));
      }
}

TEST_F(Nccl, RingAverageHasTheHostRingsBits) {
  const int r = world().rank();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const size_t count = 100003;
    std::vector<float> mine(count);
    for (size_t i = 0; i < count; ++i) mine[i] = std::sin(float(i * 13 + r * 7919)) * 3.0f;
    const std::vector<uint8_t> in = encode(mine, dt);
    RingOptions opt;
    opt.average = true;
    opt.small_bytes = 0;  // the host ring, not recursive doubling
    std::vector<uint8_t> host = in;
    ring_allreduce(world(), host.data(), count, dt, opt);
    opt.chunk_bytes = 8192;
    const auto device = on_device(in, [&](void* d) {
      comm_->allreduce_ring(d, count, dt, opt, nullptr);
      comm_->synchronize(nullptr, 60);
    });
    EXPECT_EQ(device, host);
  }
}

#endif  // RINGSTEP_HAVE_NCCL

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
