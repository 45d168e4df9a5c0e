// The NCCL communicator (comm/nccl/nccl_comm.h) under mpirun: our device ring against
// ncclAllReduce (bit-identical on integer-valued data, every dtype, counts that do and do
// not divide, one and many sub-chunks) and against the host ring on random data (the same
// reduction order and rounding, so the same bits); 1-bit Adam's compressed exchange on the
// device against the host's, bit for bit. Skips without NCCL or a GPU (CI); with
// more ranks than GPUs, NCCL may refuse the duplicate GPU, which the test prints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/ring_allreduce.h"
#include "core/dtype.h"
#include "mpi/mpitest_main.h"

#ifdef RINGSTEP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "comm/device_sign_allreduce.h"
#include "comm/nccl/nccl_device_comm.h"
#include "comm/nccl/sign_kernels.h"
#include "comm/sign_allreduce.h"
#include "core/cuda/device.h"
#include "core/intervals.h"
#include "core/runtime.h"
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
      if (world().size() > gpus)
        GTEST_SKIP() << "NCCL refused " << world().size() << " ranks on " << gpus
                     << " GPU(s): " << e.what();
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
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dt) << " count " << count << " chunk " << chunk_bytes);
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

// The trainer's device path (comm/device_comm.h) over NCCL: integer-valued buckets queued
// behind the compute stream become their mean: exactly the sum / n by our ring; by
// ncclAllReduce's ncclAvg, which may scale each rank's value by 1/n before summing, exactly
// where n is a power of two and within 1e-6 relative otherwise. The compute stream's wait is
// marked; every bucket has a span (ready <= start <= end) and comm >= exposed.
TEST_F(Nccl, DeviceCommReducesBucketsBehindTheComputeStream) {
  nccl::NcclDeviceComm dev(world(), 60);
  const int n = world().size();
  const size_t counts[] = {1000, 100'003};
  for (AllreduceAlgo algo : {AllreduceAlgo::ring, AllreduceAlgo::native}) {
    std::vector<float*> bufs;
    for (size_t c : counts) {
      std::vector<float> v(c);
      for (size_t i = 0; i < c; ++i)
        v[i] = float(int((i * 7 + size_t(world().rank()) * 3) % 11) - 5);
      auto* d = static_cast<float*>(cuda::device_alloc(c * sizeof(float)));
      cuda::copy_to_device(d, v.data(), c * sizeof(float));
      bufs.push_back(d);
    }
    for (size_t b = 0; b < bufs.size(); ++b) dev.reduce_mean(bufs[b], counts[b], algo, b);
    dev.compute_waits_for_comm();
    dev.poll_errors();
    const DeviceCommTimes t = dev.read_times();
    ASSERT_EQ(t.spans.size(), bufs.size()) << name(algo);
    ASSERT_EQ(t.waits.size(), 1u) << name(algo);
    std::vector<Interval> flight;
    for (const CommSpan& s : t.spans) {
      EXPECT_LE(s.queued_ns, s.start_ns);
      EXPECT_LE(s.start_ns, s.end_ns);
      flight.push_back({s.queued_ns, s.end_ns});
    }
    EXPECT_GE(covered_ns(flight), overlap_ns(flight, t.waits)) << name(algo);
    for (size_t b = 0; b < bufs.size(); ++b) {
      std::vector<float> got(counts[b]);
      cuda::copy_to_host(got.data(), bufs[b], got.size() * sizeof(float));
      size_t wrong = 0;
      for (size_t i = 0; i < counts[b]; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += float(int((i * 7 + size_t(r) * 3) % 11) - 5);
        const float want = sum / float(n);
        const bool exact = algo == AllreduceAlgo::ring || (n & (n - 1)) == 0;
        wrong += exact ? got[i] != want : std::fabs(got[i] - want) > 1e-6f * std::fabs(want);
      }
      EXPECT_EQ(wrong, 0u) << name(algo) << " count " << counts[b];
      cuda::device_free(bufs[b]);
    }
  }
}

// 1-bit Adam's compressed exchange on the GPUs (comm/device_sign_allreduce.h: the CUDA
// kernels, NCCL point-to-point on the comm stream) against SignAllreduce over MPI on the
// host, bit for bit, call after call: the output, both error buffers and the bytes sent,
// with one segment and with scale blocks across chunk edges, on a count that pads.
TEST_F(Nccl, DeviceSignAllreduceGivesSignAllreducesBits) {
  auto& comm = world();
  const int n = comm.size(), r = comm.rank();
  nccl::NcclDeviceComm device(comm, 60);
  Runtime& gpu = runtime(Device::cuda);
  nccl::CudaSignKernels kernels;
  const size_t count = 2 * kScaleRun + 8 * size_t(n) * 37 + 5;
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    for (const std::vector<size_t>& ends :
         {std::vector<size_t>{}, split_segments({count / 3, count}, count, 1000)}) {
      SCOPED_TRACE(::testing::Message() << name(kind) << ", segments " << ends.size());
      DeviceSignAllreduce on_device(count, ends, n, r, kind, gpu, kernels);
      SignAllreduce reference(count, ends, n, r, kind);
      const size_t bytes = count * sizeof(float);
      std::vector<float> ref_ew(count, 0.0f), ref_es(count, 0.0f);
      auto* dx = static_cast<float*>(gpu.alloc(bytes));
      auto* dew = static_cast<float*>(gpu.alloc(bytes));
      auto* des = static_cast<float*>(gpu.alloc(bytes));
      for (int c = 0; c < 3; ++c) {
        std::vector<float> x(count);
        for (size_t i = 0; i < count; ++i)
          x[i] = std::ldexp(float(int((i * 2654435761u + unsigned(r * 977 + c)) % 2001) - 1000),
                            -int(i % 13));
        std::vector<float> ref_x = x;
        const SignAllreduceStats ref = reference.encode(ref_x.data(), ref_ew.data());
        reference.exchange(comm, ref_es.data(), kSignAllreduceTag);
        reference.decode(ref_x.data());
        gpu.copy(dx, x.data(), bytes);
        EXPECT_EQ(on_device.run(device, dx, dew, des).bytes_sent, ref.bytes_sent);
        device.compute_waits_for_comm();
        device.read_times();
        std::vector<float> ew(count), es(count);
        gpu.copy(x.data(), dx, bytes);
        gpu.copy(ew.data(), dew, bytes);
        gpu.copy(es.data(), des, bytes);
        EXPECT_EQ(std::memcmp(x.data(), ref_x.data(), bytes), 0) << "output, call " << c;
        EXPECT_EQ(std::memcmp(ew.data(), ref_ew.data(), bytes), 0) << "worker error, call " << c;
        EXPECT_EQ(std::memcmp(es.data(), ref_es.data(), bytes), 0) << "server error, call " << c;
      }
      for (float* p : {dx, dew, des}) gpu.free(p);
    }
  }
}

#endif  // RINGSTEP_HAVE_NCCL

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
