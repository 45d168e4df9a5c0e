// The roofline half of the report (Williams, Waterman & Patterson 2009): each forward matrix
// product's arithmetic intensity against the machine balance, and the two machine numbers
// that balance needs that the run did not record: memory bandwidth and RAM.
#include <algorithm>
#include <chrono>
#include <vector>

#include "train/preflight.h"
#include "train/report.h"

namespace ringstep {

std::vector<RooflineRow> roofline(const ModelConfig& model, int micro_batch, double peak_gflops,
                                  double bandwidth_gbs) {
  const int64_t N = int64_t(micro_batch) * model.seq_len, C = model.d_model, T = model.seq_len,
                V = model.vocab_size, L = model.n_layers, H = model.n_heads,
                hd = C / std::max(1, model.n_heads);
  // {name, M, K, N, runs per micro-batch forward}. Attention's two products are per
  // (sequence, head), shown as full T x T products; the causal kernel skips the query
  // blocks above the diagonal (core/cpu/ops_attention.cpp), which cuts FLOPs and bytes
  // alike and moves the intensity little.
  struct Shape {
    const char* name;
    int64_t m, k, n, count;
  };
  const Shape shapes[] = {
      {"qkv", N, C, 3 * C, L},
      {"attn proj", N, C, C, L},
      {"mlp fc", N, C, 4 * C, L},
      {"mlp proj", N, 4 * C, C, L},
      {"lm head", N, C, V, 1},
      {"attn QK^T", T, hd, T, int64_t(micro_batch) * H * L},
      {"attn PV", T, T, hd, int64_t(micro_batch) * H * L},
  };
  std::vector<RooflineRow> rows;
  for (const Shape& s : shapes) {
    RooflineRow r;
    r.name = s.name, r.m = s.m, r.k = s.k, r.n = s.n, r.count = s.count;
    r.flops = 2.0 * double(r.m) * double(r.k) * double(r.n);
    r.bytes = 4.0 * double(r.m * r.k + r.k * r.n + r.m * r.n);  // fp32, each matrix once
    r.intensity = r.flops / r.bytes;
    if (bandwidth_gbs > 0 && peak_gflops > 0) {
      r.attainable_gflops = std::min(peak_gflops, r.intensity * bandwidth_gbs);
      r.bound = r.intensity >= peak_gflops / bandwidth_gbs ? "compute" : "bandwidth";
    } else {
      r.bound = "unknown";
    }
    rows.push_back(r);
  }
  return rows;
}

// STREAM's triad (McCalpin 1995): 2 reads + 1 write of 4-byte floats per element; arrays
// far larger than the caches so the number is DRAM bandwidth. Write-allocate traffic is
// not counted, as in STREAM.
MachineInfo measure_machine(int threads) {
  threads = std::max(1, threads);
  const size_t n = (size_t(64) << 20) / sizeof(float);
  std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = 0.f, b[i] = 1.f, c[i] = 2.f;  // first touch
  double best_s = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float* pa = a.data();
    const float *pb = b.data(), *pc = c.data();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    best_s = std::min(best_s,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  volatile float sink = a[n / 2];  // the stores are observed: the loop cannot be dropped
  (void)sink;
  MachineInfo m;
  m.mem_bandwidth_gbs = 3.0 * double(n) * sizeof(float) / best_s / 1e9;
  m.bandwidth_threads = threads;
  m.ram_bytes = machine_limits().ram_bytes;
  return m;
}

}  // namespace ringstep
