// gemm16 (bf16 inputs, fp32 accumulation) against OpenBLAS sgemm and our sgemm (sgemm.h) on
// the fp32 copies of the same operands, for every GEMM shape one small.yaml step runs (1024
// tokens, C = 384, vocab head 256), the attention head products and the trainer's peak
// probe (2048^3). Counter GFLOPs = 2 M N K / time / 1e9.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bench/gemm16_bench
//
// The kernel gemm16 uses is printed in the context; RINGSTEP_GEMM16=sgemm forces the
// fp32-sgemm kernel. sgemm_written/* compares memset + beta 1 with beta 0 for each dX.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu/blas_env.h"
#include "core/cpu/gemm16.h"
#include "core/cpu/sgemm.h"
#include "core/dtype.h"

#ifdef RINGSTEP_HAVE_BLAS
#include <cblas.h>
#endif

namespace {

using ringstep::DType;

struct Shape {
  std::string name;
  bool trans_a, trans_b;
  int M, N, K;
  float beta;
  int lda = 0, ldb = 0;  // 0: the dense row length
};

constexpr int kTokens = 1024;
constexpr int kC = 384;

// Forward Y = X W^T, backward dX += dY W and dW += dY^T X for each linear layer (OC x C_in),
// then the attention head products (T = 256, head size 64, q/k/v rows of stride 3C).
std::vector<Shape> trainer_shapes() {
  struct Linear {
    const char* name;
    int oc, c_in;
  };
  const Linear linears[] = {{"qkv", 3 * kC, kC},
                            {"attproj", kC, kC},
                            {"fc", 4 * kC, kC},
                            {"fcproj", kC, 4 * kC},
                            {"lmhead", 256, kC}};
  std::vector<Shape> shapes;
  for (const Linear& l : linears) {
    shapes.push_back({std::string(l.name) + "/fwd", false, true, kTokens, l.oc, l.c_in, 0.0f});
    shapes.push_back({std::string(l.name) + "/dx", false, false, kTokens, l.c_in, l.oc, 1.0f});
    shapes.push_back({std::string(l.name) + "/dw", true, false, l.oc, l.c_in, kTokens, 1.0f});
  }
  shapes.push_back({"attn/qk", false, true, 256, 256, 64, 0.0f, 3 * kC, 3 * kC});
  shapes.push_back({"attn/pv", false, false, 256, 64, 256, 0.0f, 256, 3 * kC});
  shapes.push_back({"probe/2048", false, false, 2048, 2048, 2048, 0.0f});
  return shapes;
}

// Operands of one shape, random in [-1, 1), rounded to bf16, and their exact fp32 copies.
struct Operands {
  int lda, ldb, ldc;
  std::vector<uint16_t> a16, b16;
  std::vector<float> a32, b32, c;

  explicit Operands(const Shape& s) {
    const int a_rows = s.trans_a ? s.K : s.M, a_cols = s.trans_a ? s.M : s.K;
    const int b_rows = s.trans_b ? s.N : s.K, b_cols = s.trans_b ? s.K : s.N;
    lda = s.lda ? s.lda : a_cols;
    ldb = s.ldb ? s.ldb : b_cols;
    ldc = s.N;
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto fill = [&](size_t n, std::vector<uint16_t>& h, std::vector<float>& f) {
      f.resize(n);
      for (float& x : f) x = dist(rng);
      h.resize(n);
      ringstep::fp32_to_bf16(f.data(), h.data(), n);
      ringstep::bf16_to_fp32(h.data(), f.data(), n);
    };
    fill(size_t(a_rows) * lda, a16, a32);
    fill(size_t(b_rows) * ldb, b16, b32);
    c.assign(size_t(s.M) * s.N, 0.0f);
  }
};

void set_flops(benchmark::State& state, const Shape& s) {
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * s.M * s.N * s.K / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void bench_gemm16(benchmark::State& state, const Shape& s) {
  Operands op(s);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::gemm16(DType::bf16, s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, op.a16.data(),
                          op.lda, op.b16.data(), op.ldb, s.beta, op.c.data(), op.ldc);
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

#ifdef RINGSTEP_HAVE_BLAS
void bench_sgemm(benchmark::State& state, const Shape& s) {
  Operands op(s);
  for (auto _ : state) {
    (void)_;
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f, op.a32.data(), op.lda,
                op.b32.data(), op.ldb, s.beta, op.c.data(), op.ldc);
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

// sgemm as the trainer calls it: our kernel where sgemm.h picks it (context "sgemm_kernel").
void bench_sgemm_ours(benchmark::State& state, const Shape& s) {
  Operands op(s);
  ringstep::cpu::sgemm_force_openblas(false);
  for (auto _ : state) {
    (void)_;
    ringstep::cpu::sgemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, op.a32.data(), op.lda,
                         op.b32.data(), op.ldb, s.beta, op.c.data(), op.ldc);
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}

// The two ways to write C = op(A) op(B) over old contents (a backward dX): zero C with
// memset and add with beta = 1, or beta = 0 (OpenBLAS then zeroes C in its own pass).
void bench_sgemm_written(benchmark::State& state, const Shape& s, bool memset_first) {
  Operands op(s);
  for (auto _ : state) {
    (void)_;
    if (memset_first) std::memset(op.c.data(), 0, op.c.size() * sizeof(float));
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f, op.a32.data(), op.lda,
                op.b32.data(), op.ldb, memset_first ? 1.0f : 0.0f, op.c.data(), op.ldc);
    benchmark::DoNotOptimize(op.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, s);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  ringstep::select_runtime_env(argc, argv);  // OpenBLAS's fast kernels on this CPU
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("gemm16_kernel", ringstep::cpu::gemm16_kernel(DType::bf16));
  benchmark::AddCustomContext("blas", ringstep::blas_description());
  benchmark::AddCustomContext("sgemm_kernel", ringstep::cpu::sgemm_kernel());
  // Shapes interleave the two kernels so that both see the same phase of a drifting host.
  for (const Shape& s : trainer_shapes()) {
    benchmark::RegisterBenchmark(("gemm16_bf16/" + s.name).c_str(), bench_gemm16, s)
        ->Unit(benchmark::kMicrosecond);
#ifdef RINGSTEP_HAVE_BLAS
    benchmark::RegisterBenchmark(("sgemm_fp32/" + s.name).c_str(), bench_sgemm, s)
        ->Unit(benchmark::kMicrosecond);
#endif
    benchmark::RegisterBenchmark(("sgemm_ours/" + s.name).c_str(), bench_sgemm_ours, s)
        ->Unit(benchmark::kMicrosecond);
  }
#ifdef RINGSTEP_HAVE_BLAS
  for (const Shape& s : trainer_shapes()) {
    if (s.name.size() < 3 || s.name.substr(s.name.size() - 3) != "/dx") continue;
    for (bool memset_first : {true, false})
      benchmark::RegisterBenchmark(
          ("sgemm_written/" + s.name + (memset_first ? "/memset_beta1" : "/beta0")).c_str(),
          bench_sgemm_written, s, memset_first)
          ->Unit(benchmark::kMicrosecond);
  }
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
