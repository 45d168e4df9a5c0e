// The optimizer seam on the CPU: for host buffers DevicePasses and AdamW's FlatBuffer step
// take the host paths, bit for bit what the pointer functions of optim/ give; a buffer of
// another device is refused. (Their cuda paths: tests/core/cuda/optim_cuda_cudatest.cpp.)
#include "optim/device_passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"

namespace ringstep {
namespace {

FlatBuffer Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  FlatBuffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = d(gen);
  return b;
}

bool SameBits(const FlatBuffer& a, const FlatBuffer& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TEST(DevicePasses, HostBuffersTakeTheHostPaths) {
  DevicePasses passes(Device::cpu);
  EXPECT_EQ(passes.device(), Device::cpu);
  const FlatBuffer g = Random(4099, 1);
  EXPECT_EQ(passes.sum_squares(g), sum_squares(g.data(), g.size()));

  FlatBuffer a = Random(4099, 2), b = Random(4099, 2);
  EXPECT_FALSE(passes.unscale_and_check(a, 0.25f));
  EXPECT_FALSE(unscale_and_check_host(b.data(), b.size(), 0.25f));
  EXPECT_TRUE(SameBits(a, b));
  a.data()[4098] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(passes.unscale_and_check(a, 1.0f));
  a.data()[4098] = 0;
  a.data()[0] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(passes.unscale_and_check(a, 1.0f));
}

// LossScaler's two entry points, pointer and FlatBuffer, are one pass.
TEST(DevicePasses, LossScalerFlatBufferCheckIsThePointerCheck) {
  PrecisionConfig pc;
  pc.dtype = DType::f16;  // dynamic scaling: scale 65536
  LossScaler scaler(pc);
  DevicePasses passes(Device::cpu);
  FlatBuffer a = Random(1000, 3), b = Random(1000, 3);
  EXPECT_EQ(scaler.unscale_and_check(a, passes), scaler.unscale_and_check(b.data(), b.size()));
  EXPECT_TRUE(SameBits(a, b));
}

TEST(DevicePasses, AdamWFlatBufferStepOnTheCpuIsThePointerStep) {
  Registry reg;
  reg.add("w", {31, 7});
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
