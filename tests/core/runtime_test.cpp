// The device seam (core/runtime.h) on the CPU: one runtime per device, host memory that is
// zeroed and aligned, the optimizer passes bit for bit what optim/'s pointer functions give
// and within their rounding bound of an fp64 sum, and a device this build or machine lacks
// refused with the request named. (The cuda runtime: tests/core/cuda/optim_cuda_cudatest.cpp.)
#include "core/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/cuda/device.h"
#include "core/device_clock.h"
#include "core/error.h"
#include "core/normal_values.h"
#include "core/registry.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"

namespace ringstep {
namespace {

FlatBuffer Random(size_t n, uint32_t seed) {
  const std::vector<float> v = testing::normal_values(n, seed);
  FlatBuffer b(n);
  std::copy(v.begin(), v.end(), b.data());
  return b;
}

bool SameBits(const FlatBuffer& a, const FlatBuffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(Runtime, OnePerDeviceAndEveryHostBufferHoldsIt) {
  Runtime& cpu = runtime(Device::cpu);
  EXPECT_EQ(&cpu, &runtime(Device::cpu));
  EXPECT_EQ(cpu.device(), Device::cpu);
  EXPECT_TRUE(cpu.host_memory());
  EXPECT_EQ(&FlatBuffer(10).runtime(), &cpu);
  EXPECT_EQ(&FlatBuffer().runtime(), &cpu);
  EXPECT_EQ(Arena(1024).device(), Device::cpu);
  EXPECT_EQ(cpu.make_clock(10), nullptr);  // the host clock times the CPU's phases
}

TEST(Runtime, HostMemoryIsZeroedAlignedAndCopies) {
  Runtime& cpu = runtime(Device::cpu);
  for (size_t bytes : {size_t(1), size_t(1000), size_t(3) << 20}) {
    auto* p = static_cast<unsigned char*>(cpu.alloc(bytes));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << bytes << " at " << i;
    std::vector<unsigned char> src(bytes, 7);
    cpu.copy(p, src.data(), bytes);
    EXPECT_EQ(std::memcmp(p, src.data(), bytes), 0);
    cpu.zero(p, bytes);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0);
    cpu.free(p);
  }
  cpu.free(nullptr);
  const DeviceMemory mem = cpu.memory();
  EXPECT_GT(mem.total_bytes, size_t(1) << 28);
  EXPECT_LE(mem.free_bytes, mem.total_bytes);
}

TEST(Runtime, MissingDeviceIsAnInputErrorNamingTheRequest) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is usable here";
  try {
    runtime(Device::cuda, "flat buffer");
    FAIL() << "runtime(cuda) returned";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("flat buffer: device cuda is not available: ", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(FlatBuffer(10, Device::cuda), InputError);
  EXPECT_THROW(Arena(1024, Device::cuda), InputError);
}

// The norm's float blocks (core/cpu/optim_passes.h) against an fp64 sum: each block of 1024
// squares rounds at most 1023 times in float, so the relative error is below 1024 * 2^-24
// (about 6e-5) whatever the data; for these values it is near sqrt(1024) * 2^-24.
TEST(Runtime, SumOfSquaresIsThePointerPassAndNearTheFp64Sum) {
  Runtime& cpu = runtime(Device::cpu);
  for (size_t n : {size_t(0), size_t(1), size_t(1023), size_t(4099), size_t(1000003)}) {
    const FlatBuffer g = Random(n, 1);
    const double got = cpu.sum_squares(g.data(), n);
    EXPECT_EQ(got, sum_squares(g.data(), n)) << n;
    EXPECT_EQ(got, sum_squares(g)) << n;
    double want = 0;
    for (size_t i = 0; i < n; ++i) want += double(g.data()[i]) * double(g.data()[i]);
    EXPECT_NEAR(got, want, 1024 * 0x1p-24 * want) << n;
    EXPECT_NEAR(std::sqrt(got), std::sqrt(want), 1e-6 * std::sqrt(want)) << n;
  }
}

TEST(Runtime, UnscaleAndCheckScalesExactlyAndFindsEveryNonFinite) {
  Runtime& cpu = runtime(Device::cpu);
  const size_t n = 4099;
  const FlatBuffer g = Random(n, 2);
  FlatBuffer a = Random(n, 2);
  EXPECT_FALSE(cpu.unscale_and_check(a.data(), n, 0.25f));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(a.data()[i], g.data()[i] * 0.25f) << i;
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (size_t at : {size_t(0), n / 2, n - 1}) {
      FlatBuffer b = Random(n, 2);
      b.data()[at] = bad;
      EXPECT_TRUE(cpu.unscale_and_check(b.data(), n, 1.0f)) << bad << " at " << at;
      EXPECT_TRUE(cpu.unscale_and_check(b.data(), n, 0.5f)) << bad << " at " << at;
    }
}

// LossScaler's two entry points, pointer and FlatBuffer, are one pass.
TEST(Runtime, LossScalerFlatBufferCheckIsThePointerCheck) {
  PrecisionConfig pc;
  pc.dtype = DType::f16;  // dynamic scaling: scale 65536
  LossScaler scaler(pc);
  FlatBuffer a = Random(1000, 3), b = Random(1000, 3);
  EXPECT_EQ(scaler.unscale_and_check(a), scaler.unscale_and_check(b.data(), b.size()));
  EXPECT_TRUE(SameBits(a, b));
}

TEST(Runtime, AdamWFlatBufferStepIsThePointerStep) {
  Registry reg;
  reg.add("w", {301, 77});  // more than one of the CPU pass's chunks
  reg.add("b", {7}, false);
  const AdamWParams hp{0.9, 0.95, 1e-8, 0.1};
  AdamW by_buffer(reg, hp), by_pointer(reg, hp);
  FlatBuffer p1 = Random(reg.total_numel(), 4), p2 = Random(reg.total_numel(), 4);
  for (int t = 1; t <= 3; ++t) {
    const FlatBuffer g = Random(reg.total_numel(), 10 + t);
    by_buffer.step(p1, g, 1e-2, 0.5);
    by_pointer.step(p2.data(), g.data(), 1e-2, 0.5);
  }
  EXPECT_TRUE(SameBits(p1, p2));
  EXPECT_TRUE(SameBits(by_buffer.m(), by_pointer.m()));
  EXPECT_TRUE(SameBits(by_buffer.v(), by_pointer.v()));
  EXPECT_EQ(by_buffer.step_count(), 3);
}

}  // namespace
}  // namespace ringstep
