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

#include "comm/device_comm.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/ring_allreduce.h"
#include "core/dtype.h"
#include "mpi/mpitest_main.h"

#ifdef RINGSTEP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "comm/nccl/nccl_device_comm.h"
#include "comm/nccl/sign_kernels.h"
#include "comm/sign_allreduce.h"
#include "core/cuda/device.h"
#include "core/intervals.h"
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

// 1-bit Adam's worker stage on the GPU (comm/nccl/sign_kernels.h) against the host code,
// bit for bit, on each rank's own GPU: z = x + e, the scale (both kinds), the packed signs
// and the new error equal SignAllreduce::encode's over one segment (its error buffer),
// sign_scale and pack_signs; a count with a partial warp, byte and run.
TEST(SignKernels, WorkerStageHasTheHostCodesBits) {
  if (const std::string why = nccl::unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  cuda::use_local_device();
  const size_t n = 2 * kScaleRun + 45;
  for (OneBitScale kind : {OneBitScale::mean_abs, OneBitScale::l2}) {
    std::vector<float> x(n), e(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = std::ldexp(float(int((i * 2654435761u) % 2001) - 1000), -int(i % 13));
      e[i] = std::ldexp(float(int((i * 40503u) % 201) - 100), -12);
    }
    std::vector<float> z(n);
    for (size_t i = 0; i < n; ++i) z[i] = x[i] + e[i];
    const float ref_scale = sign_scale(z.data(), n, kind);
    std::vector<uint8_t> ref_bits((n + 7) / 8);
    pack_signs(z.data(), n, ref_bits.data());
    std::vector<float> ref_error = e;
    SignAllreduce(n, {n}, 1, 0, kind).encode(x.data(), ref_error.data());

    auto* dx = static_cast<float*>(cuda::device_alloc(n * sizeof(float)));
    auto* de = static_cast<float*>(cuda::device_alloc(n * sizeof(float)));
    auto* runs = static_cast<double*>(cuda::device_alloc(3 * sizeof(double)));
    auto* ds = static_cast<float*>(cuda::device_alloc(sizeof(float)));
    auto* db = static_cast<uint8_t*>(cuda::device_alloc(ref_bits.size()));
    cuda::copy_to_device(dx, x.data(), n * sizeof(float));
    cuda::copy_to_device(de, e.data(), n * sizeof(float));
    nccl::launch_add_error(dx, de, n, nullptr);
    nccl::launch_scale(de, n, kind == OneBitScale::mean_abs, runs, ds, nullptr);
    nccl::launch_code(de, n, ds, db, nullptr);
    float scale = 0;
    std::vector<uint8_t> bits(ref_bits.size());
    std::vector<float> error(n);
    cuda::copy_to_host(&scale, ds, sizeof scale);
    cuda::copy_to_host(bits.data(), db, bits.size());
    cuda::copy_to_host(error.data(), de, n * sizeof(float));
    for (void* p : {static_cast<void*>(dx), static_cast<void*>(de), static_cast<void*>(runs),
                    static_cast<void*>(ds), static_cast<void*>(db)})
      cuda::device_free(p);
    EXPECT_EQ(std::memcmp(&scale, &ref_scale, sizeof scale), 0) << scale << " vs " << ref_scale;
    EXPECT_EQ(bits, ref_bits);
    EXPECT_EQ(std::memcmp(error.data(), ref_error.data(), n * sizeof(float)), 0);
  }
}

#endif  // RINGSTEP_HAVE_NCCL

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) { return ringstep::testing::run_mpi_tests(argc, argv); }
