#include "core/registry.h"

#include <gtest/gtest.h>

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

TEST(FlatBuffer, CudaMemoryIsAnInputErrorInThisBuild) {
  EXPECT_THROW(FlatBuffer(16, Device::cuda), InputError);
}

}  // namespace
}  // namespace ringstep
