// The GPU step benchmark of issue 12: GPT-2 124M (V 50257, T 1024, C 768, 12 layers, 12
// heads) forward + backward on cuda, bf16 by default, through Gpt and CudaBackend; no
// optimizer (the trainer's whole step: configs/gpt2-124m.yaml). Prints per-phase
// milliseconds (median of the timed steps, host clock after a device synchronise), tokens/s
// and MFU against the dense peak of the GPU in core/cuda/gpu_peak.cpp's table (bf16 or fp16,
// or fp32 without TF32; FLOPs 6N + 6LCT per token, as the CPU path counts them:
// Gpt::model_flops_per_token), then one RESULT line. Then the fused attention of one layer
// alone at the same shape (CudaBackend's attention_forward and attention_backward), for each
// storage dtype, whatever the step's: fp32 (the SIMT kernel), bf16 and fp16 (tensor cores,
// core/cuda/flash_attention.h's flash_kernel_for): ms and TFLOP/s, counting the causal half
// only (forward 2 B T^2 C FLOPs: QK^T and PV; backward 2.5 times that: QK^T, dP, dV, dK,
// dQ), one ATTENTION line each.
//   ringstep_cuda_bench [B] [steps] [fp32|bf16|fp16]     (bf16 by default; exit 2 otherwise)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/cuda/device.h"
#include "core/cuda/flash_attention.h"
#include "core/cuda/gpu_peak.h"
#include "models/gpt.h"

namespace ringstep {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of one attention forward and one backward of GPT-2's shape, on zeroed inputs
// (the kernels' work does not depend on the values).
void attention_bench(int B, int T, int C, int NH, int reps, DType dt) {
  auto be = make_backend(Device::cuda, dt);
  const size_t es = dtype_size(dt), nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C;
  void* qkv = cuda::device_alloc(nqkv * es);
  void* out = cuda::device_alloc(nout * es);
  void* state = cuda::device_alloc(be->attention_state_bytes(B, T, NH));
  auto* dqkv = static_cast<float*>(cuda::device_alloc(nqkv * sizeof(float)));
  auto* dout = static_cast<float*>(cuda::device_alloc(nout * sizeof(float)));
  cuda::device_memset_zero(qkv, nqkv * es);
  cuda::device_memset_zero(dout, nout * sizeof(float));
  cuda::device_memset_zero(dqkv, nqkv * sizeof(float));
  Arena arena(size_t(16) << 20, Device::cuda);
  std::vector<double> fwd, bwd;
  for (int r = 0; r < reps + 2; ++r) {
    cuda::device_synchronize();
    const double t0 = now_ms();
    be->attention_forward(out, state, qkv, B, T, C, NH, arena);
    cuda::device_synchronize();
    const double t1 = now_ms();
    be->attention_backward(dqkv, dout, qkv, out, state, B, T, C, NH, arena);
    cuda::device_synchronize();
    const double t2 = now_ms();
    if (r >= 2) {
      fwd.push_back(t1 - t0);
      bwd.push_back(t2 - t1);
    }
  }
  for (void* p : {qkv, out, state, static_cast<void*>(dqkv), static_cast<void*>(dout)})
    cuda::device_free(p);
  const double f = median(fwd), b = median(bwd), flops = 2.0 * B * T * double(T) * C;
  const bool tc = cuda::flash_kernel_for(dt) == cuda::flash::FlashKernel::tensor_core;
  std::printf(
      "ATTENTION %s %s B=%d T=%d C=%d NH=%d, one layer: forward %.3f ms (%.1f TFLOP/s), "
      "backward %.3f ms (%.1f TFLOP/s)\n",
      dtype_name(dt), tc ? "tensor_core" : "simt", B, T, C, NH, f, flops / f / 1e9, b,
      2.5 * flops / b / 1e9);
}

int run(int B, int steps, DType dt) {
  if (!cuda_available()) {
    std::printf("RESULT skipped: no CUDA device\n");
    return 0;
  }
  ModelConfig m{50257, 1024, 768, 12, 12};
  const int T = m.seq_len;
  GptOptions opt;
  opt.act_dtype = dt;
  Gpt gpt(m, opt, Device::cuda);
  gpt.init(1);
  Arena arena(gpt.count_arena_bytes(B, T), Device::cuda);
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 7919) % m.vocab_size);
    tg[i] = int32_t((i * 104729 + 1) % m.vocab_size);
  }
  std::vector<double> fwd, bwd;
  float loss = 0;
  for (int s = 0; s < steps + 2; ++s) {  // two warm-up steps: cuBLASLt heuristics, clocks
    gpt.grads().zero();
    cuda::device_synchronize();
    const double t0 = now_ms();
    loss = gpt.forward(in.data(), tg.data(), B, T, arena);  // returns after a sync
    const double t1 = now_ms();
    gpt.backward(1.0f, arena);
    cuda::device_synchronize();
    const double t2 = now_ms();
    if (s >= 2) {
      fwd.push_back(t1 - t0);
      bwd.push_back(t2 - t1);
    }
  }
  const std::string gpu = cuda_device_name();
  const double f = median(fwd), b = median(bwd), step = f + b;
  const double tok_s = double(B) * T / (step / 1e3);
  const double peak = gpu_peak_gflops(gpu, dt, false) / 1e3;
  const double achieved = gpt.model_flops_per_token() * tok_s / 1e12;
  std::printf("gpu: %s; params %zu; arena %.2f GiB; loss %.4f\n", gpu.c_str(), gpt.param_count(),
              double(arena.peak_bytes()) / (1 << 30), loss);
  std::printf("phase     ms (median of %d)\nforward   %.2f\nbackward  %.2f\nstep      %.2f\n",
              steps, f, b, step);
  std::printf("RESULT %s B=%d T=%d: %.1f ms/step, %.0f tok/s, %.1f TFLOP/s, MFU %.1f%% of %.0f\n",
              dtype_name(dt), B, T, step, tok_s, achieved, peak > 0 ? 100 * achieved / peak : 0.0,
              peak);
  for (const DType adt : {DType::f32, DType::bf16, DType::f16})
    attention_bench(B, T, m.d_model, m.n_heads, steps, adt);
  return 0;
}

}  // namespace
}  // namespace ringstep

int main(int argc, char** argv) {
  const int B = argc > 1 ? std::atoi(argv[1]) : 16;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  ringstep::DType dt = ringstep::DType::bf16;
  try {
    if (argc > 3) dt = ringstep::parse_dtype(argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringstep_cuda_bench: %s\n", e.what());
    return 2;
  }
  try {
    return ringstep::run(B, steps, dt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringstep_cuda_bench: %s\n", e.what());
    return 1;
  }
}
