// The fused attention kernels (core/cuda/flash_attention.h) held to their host twin
// (core/cuda/flash_twin.h) and to the CPU attention op (core/cpu/ops.h, in double), for
// each (storage, kernel) pair of flash_variants.h: fp32 on SIMT, bf16 and fp16 on SIMT and
// on tensor cores. Odd T, head sizes 4 to 128, B > 1, NH > 1. Against the CPU op: relative
// error within flash_tolerance_vs_cpu (1e-5 fp32; 2u, 7.8e-3 bf16 and 9.8e-4 fp16). Against
// the twin, which does the same arithmetic in another order: the LSE within 1e-5; out and
// dqkv within flash_tolerance_vs_twin (1e-5 fp32; u, 3.9e-3 bf16 and 4.9e-4 fp16: an fp32
// last-bit difference can round a 16-bit value, P, dS or out, to its neighbour). The
// backward twin runs on the kernel's own out and LSE, so each direction is checked on its
// own. Skips without a GPU, except the backend's choice of kernel (host code).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_skip.h"
#include "core/cuda/flash_variants.h"
#include "core/dtype.h"

#ifdef RINGSTEP_HAVE_CUDA
#include <random>

#include "core/cpu/ops.h"
#include "core/cuda/device.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/flash_twin.h"
#include "core/normal_values.h"
#endif

namespace ringstep::cuda {
namespace {

#ifndef RINGSTEP_HAVE_CUDA
TEST(FlashKernels, SkippedWithoutCuda) { GTEST_SKIP() << testing::cuda_skip_reason(); }
#else

using flash::FlashKernel;

// The kernel CudaBackend runs for each storage (host code: runs without a device).
TEST(FlashKernelFor, TensorCoresFor16BitStorageSimtForFp32) {
  EXPECT_EQ(flash_kernel_for(DType::f32), FlashKernel::simt);
  EXPECT_EQ(flash_kernel_for(DType::bf16), FlashKernel::tensor_core);
  EXPECT_EQ(flash_kernel_for(DType::f16), FlashKernel::tensor_core);
}

template <typename Want>
double rel_err(const std::vector<float>& got, const std::vector<Want>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - double(want[i])) * (got[i] - double(want[i]));
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A device buffer of N values stored as DT, filled from and read back as floats.
class DeviceValues {
 public:
  DeviceValues(size_t n, DType dt) : n_(n), dt_(dt), p_(device_alloc(n * dtype_size(dt))) {}
  ~DeviceValues() { device_free(p_); }
  DeviceValues(const DeviceValues&) = delete;
  DeviceValues& operator=(const DeviceValues&) = delete;
  void set(const std::vector<float>& v) {
    if (dt_ == DType::f32) return copy_to_device(p_, v.data(), n_ * sizeof(float));
    std::vector<uint16_t> h(n_);
    narrow_from_fp32(dt_, v.data(), h.data(), n_);
    copy_to_device(p_, h.data(), n_ * sizeof(uint16_t));
  }
  std::vector<float> get() const {
    std::vector<float> v(n_);
    if (dt_ == DType::f32) {
      copy_to_host(v.data(), p_, n_ * sizeof(float));
    } else {
      std::vector<uint16_t> h(n_);
      copy_to_host(h.data(), p_, n_ * sizeof(uint16_t));
      widen_to_fp32(dt_, h.data(), v.data(), n_);
    }
    return v;
  }
  void* ptr() { return p_; }
  float* f() { return static_cast<float*>(p_); }

 private:
  size_t n_;
  DType dt_;
  void* p_;
};

using ringstep::testing::normal_values;

using Variant = testing::FlashVariant;

class FlashKernels : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    if (const std::string why = testing::cuda_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }

  void check(int B, int T, int C, int NH, uint32_t seed) {
    const auto [dt, kernel] = GetParam();
    SCOPED_TRACE(::testing::Message()
                 << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH << " hs=" << C / NH);
    const double tol_cpu = testing::flash_tolerance_vs_cpu(dt);
    const double tol_twin = testing::flash_tolerance_vs_twin(dt);
    const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, nrow = size_t(B) * NH * T;
    std::vector<float> qkv = normal_values(nqkv, seed);
    if (dt != DType::f32) round_to_dtype(dt, qkv.data(), qkv.data(), nqkv);
    const std::vector<float> dout = normal_values(nout, seed + 1),
                             dqkv0 = normal_values(nqkv, seed + 2);

    DeviceValues d_qkv(nqkv, dt), d_out(nout, dt), d_lse(nrow, DType::f32),
        d_dqkv(nqkv, DType::f32), d_dout(nout, DType::f32), d_dsum(nrow, DType::f32);
    d_qkv.set(qkv);
    d_dout.set(dout);
    d_dqkv.set(dqkv0);
    flash_attention_forward(kernel, dt, d_out.ptr(), d_lse.f(), d_qkv.ptr(), B, T, C, NH, nullptr);
    flash_attention_backward(kernel, dt, d_dqkv.f(), d_dout.f(), d_qkv.ptr(), d_out.ptr(),
                             d_lse.f(), d_dsum.f(), B, T, C, NH, nullptr);
    device_synchronize();
    const std::vector<float> out = d_out.get(), lse = d_lse.get(), dqkv = d_dqkv.get();

    // The CPU op in double on the same (rounded) inputs.
    std::vector<double> qkv_d(qkv.begin(), qkv.end()), out_d(nout), att_d(nrow * T);
    std::vector<double> dqkv_d(dqkv0.begin(), dqkv0.end()), dout_d(dout.begin(), dout.end());
    cpu::attention_forward<double>(out_d.data(), att_d.data(), qkv_d.data(), B, T, C, NH);
    cpu::attention_backward<double>(dqkv_d.data(), dout_d.data(), qkv_d.data(), att_d.data(), B, T,
                                    C, NH);
    EXPECT_LE(rel_err(out, out_d), tol_cpu) << "out vs cpu";
    EXPECT_LE(rel_err(dqkv, dqkv_d), tol_cpu) << "dqkv vs cpu";

    std::vector<float> out_t(nout), lse_t(nrow), dqkv_t = dqkv0;
    flash_forward_twin(dt, kernel, out_t.data(), lse_t.data(), qkv.data(), B, T, C, NH);
    flash_backward_twin(dt, kernel, dqkv_t.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                        B, T, C, NH);
    EXPECT_LE(rel_err(out, out_t), tol_twin) << "out vs twin";
    EXPECT_LE(rel_err(lse, lse_t), 1e-5) << "lse vs twin";
    EXPECT_LE(rel_err(dqkv, dqkv_t), tol_twin) << "dqkv vs twin";
  }
};

TEST_P(FlashKernels, MatchTheirTwinAndTheCpuOp) {
  const int shapes[][4] = {
      {2, 1, 12, 3},     // T = 1, hs 4
      {1, 7, 15, 3},     // hs 5
      {3, 33, 15, 3},    // hs 5, B 3
      {2, 63, 48, 3},    // hs 16
      {1, 64, 64, 2},    // hs 32, exactly one block
      {2, 65, 128, 2},   // hs 64, one row into the second block
      {1, 130, 128, 1},  // hs 128, three blocks
      {2, 130, 96, 3},   // hs 32
      {1, 200, 192, 3},  // hs 64, four blocks
      {1, 1024, 128, 2}  // hs 64, GPT-2's T: 16 blocks
  };
  uint32_t seed = 1;
  for (const auto& s : shapes) check(s[0], s[1], s[2], s[3], seed += 3);
}

// Each listed (storage, kernel) pair is taken (B = 0: checked, nothing launched); a head
// size past 128 and fp32 on tensor cores are refused.
TEST_P(FlashKernels, RejectBadArguments) {
  const auto [dt, kernel] = GetParam();
  EXPECT_NO_THROW(
      flash_attention_forward(kernel, dt, nullptr, nullptr, nullptr, 0, 4, 64, 2, nullptr));
  EXPECT_NO_THROW(flash_attention_backward(kernel, dt, nullptr, nullptr, nullptr, nullptr, nullptr,
                                           nullptr, 0, 4, 64, 2, nullptr));
  EXPECT_THROW(
      flash_attention_forward(kernel, dt, nullptr, nullptr, nullptr, 1, 4, 258, 2, nullptr),
      std::invalid_argument);  // hs 129
  EXPECT_THROW(flash_attention_forward(FlashKernel::tensor_core, DType::f32, nullptr, nullptr,
                                       nullptr, 1, 4, 64, 2, nullptr),
               std::invalid_argument);  // tensor cores take bf16 and fp16, not fp32
  EXPECT_THROW(flash_attention_backward(FlashKernel::tensor_core, DType::f32, nullptr, nullptr,
                                        nullptr, nullptr, nullptr, nullptr, 1, 4, 64, 2, nullptr),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Variants, FlashKernels, testing::flash_variants(),
                         testing::flash_variant_name);

#endif  // RINGSTEP_HAVE_CUDA

}  // namespace
}  // namespace ringstep::cuda
