#include "core/registry.h"
#include "core/cuda/device.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"

namespace ringstep {
namespace {

TEST(FlatBuffer, IsZeroedCpuMemoryAndKeepsItsDeviceWhenMoved) {
  FlatBuffer a(100);
  EXPECT_EQ(a.device(), Device::cpu);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data()[i], 0.0f) << i;
  FlatBuffer b = std::move(a);
  EXPECT_EQ(b.device(), Device::cpu);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(a.size(), 0u);
}

// A model with millions of tensors builds in linear time: the duplicate check and find() are
// hash lookups, not a scan (a quadratic registry hung on model.n_layers near 2^31).
TEST(Registry, DuplicateCheckAndFindAreConstantTime) {
  Registry reg;
  constexpr int kTensors = 1000000;
  for (int i = 0; i < kTensors; ++i) reg.add("h." + std::to_string(i), {1});
  EXPECT_EQ(reg.size(), size_t(kTensors));
  EXPECT_EQ(reg.find("h.123456").offset, 123456 * Registry::kAlignElems);
  EXPECT_THROW(reg.add("h.7", {1}), std::logic_error);
  EXPECT_THROW(reg.find("h.-1"), std::out_of_range);
}

TEST(FlatBuffer, CudaMemoryIsAnInputErrorWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here";
  EXPECT_THROW(FlatBuffer(16, Device::cuda), InputError);
}

}  // namespace
}  // namespace ringstep
