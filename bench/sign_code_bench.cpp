// The worker stage of 1-bit Adam's exchange on one 16 MiB bucket (4 Mi elements cut into
// small.yaml-sized tensors of 384 x 1536): the local momentum stored by its own pass and then
// coded (encode(x, e)), against formed inside the coding pass (encode with a SignInput,
// comm/sign_allreduce.h), on one thread; the fused pass and the decoding on 1 and 2 threads
// (the argument; wall-clock time). docs/perf-log.md section 16.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "comm/sign_allreduce.h"

namespace ringstep {
namespace {

constexpr size_t kCount = size_t(4) << 20;
constexpr float kBeta1 = 0.9f, kScale = 0.5f;

struct Bucket {
  std::vector<float> m, g, e;
  std::vector<size_t> ends;
  SignAllreduce call;
  Bucket()
      : m(kCount), g(kCount), e(kCount), call(kCount, segment_ends(), 2, 0, OneBitScale::mean_abs) {
    for (size_t i = 0; i < kCount; ++i) {
      m[i] = 1e-3f * std::sin(float(i));
      g[i] = 1e-2f * std::cos(0.7f * float(i));
    }
  }
  static std::vector<size_t> segment_ends() {
    std::vector<size_t> out;
    for (size_t end = 384 * 1536; end < kCount; end += 384 * 1536) out.push_back(end);
    out.push_back(kCount);
    return out;
  }
};

void BM_MomentumThenEncode(benchmark::State& state) {
  Bucket k;
  for (auto _ : state) {
    float* __restrict m = k.m.data();
    const float* __restrict g = k.g.data();
#pragma omp simd
    for (size_t i = 0; i < kCount; ++i) m[i] = kBeta1 * m[i] + (1.0f - kBeta1) * (g[i] * kScale);
    benchmark::DoNotOptimize(k.call.encode(k.m.data(), k.e.data()));
  }
  state.SetItemsProcessed(int64_t(state.iterations() * kCount));
}

// 1-bit Adam's momentum formed inside the coding pass: z += beta1 m + (1 - beta1) g scale.
SignInput momentum_input(Bucket& k) {
  return [&k](size_t b, size_t e, float* __restrict z) {
    const float* __restrict m = k.m.data() + b;
    const float* __restrict g = k.g.data() + b;
#pragma omp simd
    for (size_t i = 0; i < e - b; ++i) z[i] += kBeta1 * m[i] + (1.0f - kBeta1) * (g[i] * kScale);
  };
}

void BM_EncodeFormingMomentum(benchmark::State& state) {
  Bucket k;
  for (auto _ : state) {
    const SignInput input = momentum_input(k);
    benchmark::DoNotOptimize(k.call.encode(input, k.e.data()));
  }
  state.SetItemsProcessed(int64_t(state.iterations() * kCount));
}

// The fused pass, then the decoding of what it sent (a stand-in for the mean: the same
// work), on state.range(0) threads.
void BM_EncodeDecodeThreads(benchmark::State& state) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(int(state.range(0)));
  Bucket k;
  for (auto _ : state) {
    const SignInput input = momentum_input(k);
    benchmark::DoNotOptimize(k.call.encode(input, k.e.data()));
    k.call.decode(k.m.data());
  }
  omp_set_num_threads(saved);
  state.SetItemsProcessed(int64_t(state.iterations() * kCount));
}

BENCHMARK(BM_MomentumThenEncode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeFormingMomentum)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeDecodeThreads)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ringstep

BENCHMARK_MAIN();
