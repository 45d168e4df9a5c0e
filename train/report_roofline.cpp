// The roofline half of the report (Williams, Waterman & Patterson 2009): each forward matrix
// product's arithmetic intensity against the machine balance, each measured op against the
// time its bound allows, and the two machine numbers that balance needs that the run did
// not record: memory bandwidth and RAM.
#include <algorithm>
#include <chrono>
#include <vector>

#include "models/gpt_spec.h"
#include "train/preflight.h"
#include "train/report.h"

namespace ringstep {

std::vector<RooflineRow> roofline(const ModelConfig& model, int micro_batch, double peak_gflops,
                                  double bandwidth_gbs) {
  std::vector<RooflineRow> rows;
  // Attention's two products are per (sequence, head), shown as full T x T products; the
  // causal kernel skips the query blocks above the diagonal (core/cpu/ops_attention.cpp),
  // which cuts FLOPs and bytes alike and moves the intensity little.
  for (const GptProduct& s : GptSpec(model).products(micro_batch)) {
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

void measured_roofline(const std::vector<StepRecord>& recs, double peak_gflops,
                       double bandwidth_gbs, ReportData& r) {
  OpProfile sum;
  r.op_steps = 0;
  for (const StepRecord& s : recs) {
    if (s.ops.empty()) continue;
    ++r.op_steps;
    for (size_t p = 0; p < kOpPhaseCount; ++p)
      for (size_t o = 0; o < kOpCount; ++o) {
        OpStat& t = sum.stat[p][o];
        const OpStat& x = s.ops.stat[p][o];
        t.calls += x.calls, t.ms += x.ms, t.flops += x.flops, t.bytes += x.bytes;
      }
  }
  r.ops.clear();
  if (r.op_steps == 0) return;
  double total_ms = 0;
  for (const auto& phase : sum.stat)
    for (const OpStat& x : phase) total_ms += x.ms;
  const bool known = peak_gflops > 0 && bandwidth_gbs > 0;
  for (const auto& [phase, phase_name] : enum_names(OpPhase{}))
    for (const auto& [op, op_name] : enum_names(Op{})) {
      const OpStat& x = sum.at(phase, op);
      if (x.calls == 0) continue;
      OpRow row;
      row.phase = phase, row.op = op;
      const double n = r.op_steps;
      row.calls = double(x.calls) / n, row.ms = x.ms / n, row.flops = x.flops / n;
      row.bytes = x.bytes / n;
      row.share_pct = total_ms > 0 ? 100 * x.ms / total_ms : 0;
      row.gflops = row.ms > 0 ? row.flops / (row.ms * 1e6) : 0;
      row.gbs = row.ms > 0 ? row.bytes / (row.ms * 1e6) : 0;
      row.intensity = row.bytes > 0 ? row.flops / row.bytes : 0;
      row.bound = "unknown";
      if (known) {
        const double compute_ms = row.flops / (peak_gflops * 1e6);
        const double memory_ms = row.bytes / (bandwidth_gbs * 1e6);
        row.bound_ms = std::max(compute_ms, memory_ms);
        row.bound_frac = row.ms > 0 ? row.bound_ms / row.ms : 0;
        row.bound = compute_ms >= memory_ms ? "compute" : "bandwidth";
      }
      r.ops.push_back(row);
    }
  std::stable_sort(r.ops.begin(), r.ops.end(),
                   [](const OpRow& a, const OpRow& b) { return a.ms > b.ms; });
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
  m.ram_bytes = machine_limits().memory_bytes;
  return m;
}

}  // namespace ringstep
