#include "core/backend.h"
#include "core/cuda/device.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ringstep {
namespace {

TEST(Backend, MakeBackendGivesTheCpuBackendForEachDtype) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const auto be = make_backend(Device::cpu, dt);
    EXPECT_EQ(be->device(), Device::cpu);
    EXPECT_EQ(be->act_dtype(), dt);
  }
}

TEST(Backend, CudaIsAnInputErrorNamingTheDeviceWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here";
  try {
    make_backend(Device::cuda, DType::bf16);
    FAIL() << "make_backend(cuda) returned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("device cuda is not available"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ringstep
