// The GPU peak table: names as the CUDA runtime reports them find the right entry (the more
// specific key first), each dtype picks its column, an unknown GPU has no peak.
#include "core/cuda/gpu_peak.h"

#include <gtest/gtest.h>

namespace ringstep {
namespace {

TEST(GpuPeak, RuntimeNamesFindTheirEntry) {
  EXPECT_STREQ(find_gpu_peak("NVIDIA H100 80GB HBM3")->name, "H100 SXM");
  EXPECT_STREQ(find_gpu_peak("NVIDIA H100 PCIe")->name, "H100 PCIe");
  EXPECT_STREQ(find_gpu_peak("NVIDIA H100 NVL")->name, "H100 NVL");
  EXPECT_STREQ(find_gpu_peak("NVIDIA H200")->name, "H200 SXM");
  EXPECT_STREQ(find_gpu_peak("NVIDIA H200 NVL")->name, "H200 NVL");
  EXPECT_STREQ(find_gpu_peak("NVIDIA A100-SXM4-80GB")->name, "A100");
  EXPECT_STREQ(find_gpu_peak("NVIDIA A100 80GB PCIe")->name, "A100");
  EXPECT_STREQ(find_gpu_peak("NVIDIA A10")->name, "A10");
  EXPECT_STREQ(find_gpu_peak("NVIDIA L40S")->name, "L40S");
  EXPECT_STREQ(find_gpu_peak("NVIDIA L40")->name, "L40");
  EXPECT_STREQ(find_gpu_peak("NVIDIA L4")->name, "L4");
  EXPECT_FALSE(find_gpu_peak("NVIDIA GeForce GTX 1080").has_value());
  EXPECT_FALSE(find_gpu_peak("").has_value());
}

TEST(GpuPeak, DtypePicksTheColumnInGflops) {
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("NVIDIA H200", DType::bf16, false), 989.4e3);
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("NVIDIA H200", DType::f16, false), 989.4e3);
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("NVIDIA H200", DType::f32, true), 494.7e3);
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("NVIDIA H200", DType::f32, false), 67e3);
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("NVIDIA A100-SXM4-40GB", DType::bf16, false), 312e3);
  EXPECT_DOUBLE_EQ(gpu_peak_gflops("Some GPU", DType::bf16, false), 0);
}

TEST(GpuPeak, SourceNamesTheGpuAndKindOrSaysWhatToSet) {
  EXPECT_EQ(gpu_peak_source("NVIDIA H100 80GB HBM3", DType::bf16, false),
            "H100 SXM dense bf16, datasheet");
  EXPECT_EQ(gpu_peak_source("NVIDIA L4", DType::f32, true), "L4 dense tf32, datasheet");
  EXPECT_NE(gpu_peak_source("Mystery", DType::bf16, false).find("profile.peak_gflops"),
            std::string::npos);
}

}  // namespace
}  // namespace ringstep
