#include "core/backend.h"

#include "core/runtime.h"

namespace ringstep {

double attention_state_bytes(Device device, DType act, double B, double T, double NH) {
  return device == Device::cpu ? B * NH * T * T * double(dtype_size(act)) : B * NH * T * 4.0;
}

void Backend::linear_gelu_forward(void* out, void* pre, const void* inp, const float* weight,
                                  const float* bias, int N, int C, int OC, Arena& arena) {
  linear_forward(pre, inp, weight, bias, nullptr, N, C, OC, arena);
  const auto [rows, cols] = gelu_view(N, OC, C);
  gelu_forward(out, pre, rows, cols, arena);
}

void Backend::linear_backward_gelu(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const float* weight, const void* gelu_inp,
                                   int N, int C, int OC, Arena& arena) {
  linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, arena);
  const auto [rows, cols] = gelu_view(N, C, OC);
  gelu_backward(dinp, gelu_inp, rows, cols, arena);
}

std::unique_ptr<Backend> make_backend(Device device, DType act_dtype, bool tf32) {
  return runtime(device, "backend").make_backend(act_dtype, tf32);
}

}  // namespace ringstep
