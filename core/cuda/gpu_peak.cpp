#include "core/cuda/gpu_peak.h"

#include <array>

namespace ringstep {
namespace {

struct Entry {
  std::string_view key;  // looked for in the runtime's device name
  GpuPeak peak;
};

// Datasheet numbers without sparsity (NVIDIA quotes tensor-core peaks "with sparsity": half
// of those). Order matters: the first key found in the name wins.
constexpr std::array<Entry, 10> kTable = {{
    {"H100 PCIe", {"H100 PCIe", 756.5, 756.5, 378, 51}},
    {"H100 NVL", {"H100 NVL", 835.5, 835.5, 417.5, 60}},
    {"H100", {"H100 SXM", 989.4, 989.4, 494.7, 67}},
    {"H200 NVL", {"H200 NVL", 835.5, 835.5, 417.5, 60}},
    {"H200", {"H200 SXM", 989.4, 989.4, 494.7, 67}},
    {"A100", {"A100", 312, 312, 156, 19.5}},
    {"A10", {"A10", 125, 125, 62.5, 31.2}},
    {"L40S", {"L40S", 362.05, 362.05, 183, 91.6}},
    {"L40", {"L40", 181, 181, 90.5, 90.5}},
    {"L4", {"L4", 121, 121, 60, 30.3}},
}};

double tflops_for(const GpuPeak& p, DType dt, bool tf32) {
  switch (dt) {
    case DType::bf16:
      return p.bf16;
    case DType::f16:
      return p.fp16;
    case DType::f32:
      return tf32 ? p.tf32 : p.fp32;
  }
  return 0;
}

const char* kind_for(DType dt, bool tf32) {
  if (dt == DType::f32) return tf32 ? "tf32" : "fp32";
  return dt == DType::bf16 ? "bf16" : "fp16";
}

}  // namespace

std::optional<GpuPeak> find_gpu_peak(std::string_view device_name) {
  for (const Entry& e : kTable)
    if (device_name.find(e.key) != std::string_view::npos) return e.peak;
  return std::nullopt;
}

double gpu_peak_gflops(std::string_view device_name, DType dt, bool tf32) {
  const std::optional<GpuPeak> p = find_gpu_peak(device_name);
  return p ? tflops_for(*p, dt, tf32) * 1e3 : 0;
}

std::string gpu_peak_source(std::string_view device_name, DType dt, bool tf32) {
  const std::optional<GpuPeak> p = find_gpu_peak(device_name);
  if (!p)
    return "GPU '" + std::string(device_name) +
           "' is not in core/cuda/gpu_peak.cpp's table: set profile.peak_gflops for MFU";
  return std::string(p->name) + " dense " + kind_for(dt, tf32) + ", datasheet";
}

}  // namespace ringstep
