// Dense (no structured sparsity) tensor-core peaks of known NVIDIA GPUs, from the vendors'
// datasheets, looked up by the device name the CUDA runtime reports ("NVIDIA H100 80GB
// HBM3"): the MFU denominator of a cuda run unless profile.peak_gflops overrides it
// (docs/metrics.md). Plain C++: tested on the CPU.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"

namespace ringstep {

struct GpuPeak {
  const char* name;  // the table's name of the GPU, e.g. "H100 SXM"
  // TFLOP/s: bf16 and fp16 tensor-core products with fp32 accumulation, TF32 tensor-core
  // products, fp32 on the CUDA cores.
  double bf16, fp16, tf32, fp32;
};

// The entry whose key occurs in DEVICE_NAME (more specific keys first: "H100 PCIe" before
// "H100", "A100" before "A10"); nullopt for a GPU the table does not know.
std::optional<GpuPeak> find_gpu_peak(std::string_view device_name);

// The peak, in GFLOP/s, of the products a model with activations of dtype DT runs on
// (fp32: TF32 when TF32 is set); 0 when DEVICE_NAME is unknown.
double gpu_peak_gflops(std::string_view device_name, DType dt, bool tf32);

// How the header names the peak: "H100 SXM dense bf16, datasheet", or why there is none.
std::string gpu_peak_source(std::string_view device_name, DType dt, bool tf32);

}  // namespace ringstep
