// The (storage, kernel) pairs the fused attention runs (core/cuda/flash_tiling.h): fp32 and
// fp16 on the SIMT kernel, bf16 on both. One list for the tests of the kernels and of their
// host twin, with gtest names such as "bf16_tensor_core".
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/cuda/flash_tiling.h"
#include "core/dtype.h"

namespace ringstep::testing {

using FlashVariant = std::pair<DType, cuda::flash::FlashKernel>;

inline auto flash_variants() {
  return ::testing::Values(FlashVariant{DType::f32, cuda::flash::FlashKernel::simt},
                           FlashVariant{DType::bf16, cuda::flash::FlashKernel::simt},
                           FlashVariant{DType::bf16, cuda::flash::FlashKernel::tensor_core},
                           FlashVariant{DType::f16, cuda::flash::FlashKernel::simt});
}

inline std::string flash_variant_name(const ::testing::TestParamInfo<FlashVariant>& info) {
  return std::string(name(info.param.first)) +
         (info.param.second == cuda::flash::FlashKernel::simt ? "_simt" : "_tensor_core");
}

}  // namespace ringstep::testing
