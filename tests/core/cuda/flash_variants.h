// The (storage, kernel) pairs the fused attention runs (core/cuda/flash_tiling.h): fp32 on
// the SIMT kernel, bf16 and fp16 on both (the backend runs tensor cores for 16-bit storage:
// flash_kernel_for, core/cuda/flash_attention.h). One list for the tests of the kernels and
// of their host twin, with gtest names such as "bf16_tensor_core", and the tolerances both
// hold them to.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
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
                           FlashVariant{DType::f16, cuda::flash::FlashKernel::simt},
                           FlashVariant{DType::f16, cuda::flash::FlashKernel::tensor_core});
}

// Unit roundoff of 16-bit storage DT, 2^-p for p significant bits: bf16 2^-8, fp16 2^-11.
inline double flash_unit_roundoff(DType dt) { return std::ldexp(1.0, dt == DType::f16 ? -11 : -8); }

// Relative error ||got - cpu|| / ||cpu|| of the fused attention (kernel or twin) against the
// CPU op in double on the same stored q, k, v. fp32: summation order only, 1e-5. 16-bit: 2u.
// Each result passes through at most two roundings to DT whose errors do not cancel
// (forward out: P, then out itself; dV: P and dO; dQ and dK: dO, then dS), each at most u
// relative per element and independent from element to element, so about u in norm
// through the fp32 products (q, k and v are the same stored values on both sides): 2u. Measured on
// the twin (FlashTwinVsCpu): <= 0.5u for out, 0.7u for the gradient, on either kernel and either
// 16-bit dtype.
inline double flash_tolerance_vs_cpu(DType dt) {
  return dt == DType::f32 ? 1e-5 : 2 * flash_unit_roundoff(dt);
}

// The kernel against its twin, which does the same arithmetic with fp32 sums in another
// order: 1e-5 for fp32; for 16-bit storage a last-bit fp32 difference can round a value
// (P, dS, out) to its 16-bit neighbour, 2u on that element, which few elements near a
// rounding boundary take: u in norm.
inline double flash_tolerance_vs_twin(DType dt) {
  return dt == DType::f32 ? 1e-5 : flash_unit_roundoff(dt);
}

inline std::string flash_variant_name(const ::testing::TestParamInfo<FlashVariant>& info) {
  return std::string(name(info.param.first)) +
         (info.param.second == cuda::flash::FlashKernel::simt ? "_simt" : "_tensor_core");
}

}  // namespace ringstep::testing
