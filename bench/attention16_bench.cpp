// Causal attention at small.yaml's shape (B = 4, T = 256, C = 384, NH = 6): the fp32
// attention_forward / attention_backward (Eigen maps -> OpenBLAS sgemm) against
// attention_forward16 / attention_backward16 (gemm16: AMX or AVX512-BF16 for bf16, widen + sgemm
// for fp16).
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/attention16_bench
//
// Counter GFLOPs = the block GEMMs' 2 M N K (forward 2 products, backward 4, over the
// unmasked query x key blocks) / time / 1e9; softmax and conversions are in the time only.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cpu/attention16.h"
#include "core/cpu/blas_env.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/ops.h"
#include "core/dtype.h"

namespace {

using ringstep::DType;

constexpr int kB = 4, kT = 256, kC = 384, kNH = 6;
constexpr int kQueryBlock = 64;  // ops_attention.cpp / attention16.cpp

// 2 hs sum_blocks nr * nk per (b, h) pair and product.
double flops_per_product() {
  double rows_x_keys = 0.0;
  for (int r0 = 0; r0 < kT; r0 += kQueryBlock) {
    const int nr = std::min(kQueryBlock, kT - r0);
    rows_x_keys += double(nr) * (r0 + nr);
  }
  return 2.0 * (kC / kNH) * rows_x_keys * kB * kNH;
}

// 64-byte aligned, as the trainer's activation arena is (the softmax rows' vector loops
// depend on it).
template <typename T>
using Aligned = std::vector<T, Eigen::aligned_allocator<T>>;

// q, k, v ~ N(0, 1) rounded to DT (fp32 copies exact), dout ~ N(0, 1); forward run once so
// backward has its P.
struct Buffers {
  DType dt;
  Aligned<uint16_t> qkv16, out16, att16;
  Aligned<float> qkv32, out32, att32, dout, dqkv;

  explicit Buffers(DType dt_) : dt(dt_) {
    const size_t n_qkv = size_t(kB) * kT * 3 * kC, n_out = size_t(kB) * kT * kC;
    const size_t n_att = size_t(kB) * kNH * kT * kT;
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    qkv32.resize(n_qkv);
    for (float& x : qkv32) x = dist(rng);
    qkv16.resize(n_qkv);
    if (dt == DType::bf16) {
      ringstep::fp32_to_bf16(qkv32.data(), qkv16.data(), n_qkv);
      ringstep::bf16_to_fp32(qkv16.data(), qkv32.data(), n_qkv);
    } else {
      ringstep::fp32_to_fp16(qkv32.data(), qkv16.data(), n_qkv);
      ringstep::fp16_to_fp32(qkv16.data(), qkv32.data(), n_qkv);
    }
    dout.resize(n_out);
    for (float& x : dout) x = dist(rng);
    out16.resize(n_out);
    att16.resize(n_att);
    out32.resize(n_out);
    att32.resize(n_att);
    dqkv.assign(n_qkv, 0.0f);
    ringstep::cpu::attention_forward16(dt, out16.data(), att16.data(), qkv16.data(), kB, kT, kC,
                                       kNH);
    ringstep::cpu::attention_forward(out32.data(), att32.data(), qkv32.data(), kB, kT, kC, kNH);
  }
};

void set_flops(benchmark::State& state, int products) {
  state.counters["GFLOPs"] = benchmark::Counter(products * flops_per_product() / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void fwd32(benchmark::State& state) {
  Buffers x(DType::bf16);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::attention_forward(x.out32.data(), x.att32.data(), x.qkv32.data(), kB, kT, kC,
                                     kNH);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2);
}

void bwd32(benchmark::State& state) {
  Buffers x(DType::bf16);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::attention_backward(x.dqkv.data(), x.dout.data(), x.qkv32.data(), x.att32.data(),
                                      kB, kT, kC, kNH);
    benchmark::ClobberMemory();
  }
  set_flops(state, 4);
}

void fwd16(benchmark::State& state, DType dt) {
  Buffers x(dt);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::attention_forward16(dt, x.out16.data(), x.att16.data(), x.qkv16.data(), kB, kT,
                                       kC, kNH);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2);
}

void bwd16(benchmark::State& state, DType dt) {
  Buffers x(dt);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::attention_backward16(dt, x.dqkv.data(), x.dout.data(), x.qkv16.data(),
                                        x.att16.data(), kB, kT, kC, kNH);
    benchmark::ClobberMemory();
  }
  set_flops(state, 4);
}

}  // namespace

int main(int argc, char** argv) {
  ringstep::select_runtime_env(argc, argv);  // OpenBLAS's fast kernels on this CPU
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("gemm16_kernel", ringstep::cpu::gemm16_kernel(DType::bf16));
  benchmark::AddCustomContext("blas", ringstep::blas_description());
  // Forward and backward each interleave the versions, so all see the same phase of a
  // drifting host.
  benchmark::RegisterBenchmark("attention_fp32/fwd", fwd32)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("attention_bf16/fwd", fwd16, DType::bf16)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("attention_fp16/fwd", fwd16, DType::f16)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("attention_fp32/bwd", bwd32)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("attention_bf16/bwd", bwd16, DType::bf16)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("attention_fp16/bwd", bwd16, DType::f16)
      ->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
