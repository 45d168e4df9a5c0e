// `ringstep report RUN_DIR`: reads a run directory (steps.jsonl, summary.json, config.yaml)
// and turns it into step-time percentiles, the breakdown in % of step, throughput and MFU,
// the slowest ranks, a roofline view of the model's matrix products and a diagnosis: rules
// that each cite the numbers that fired them. docs/logs.md defines every number and rule.
// analyze() is pure (no clock, no machine probe) so tests pin its numbers; run_report()
// measures the machine, then prints text or one JSON object.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "optim/onebit_adam.h"

namespace ringstep {

// What the report needs to know about the machine it judges. 0 = unknown: the roofline
// then says no bound and the activation-memory rule does not run.
struct MachineInfo {
  double mem_bandwidth_gbs = 0;  // STREAM-like triad, 10^9 bytes/s
  int bandwidth_threads = 0;     // threads the triad ran on
  double ram_bytes = 0;          // physical RAM of this node
};

// Triad a = b + s*c over three 64 MiB fp32 arrays on THREADS threads, best of 5, and the
// physical RAM (sysconf). Takes about a second.
MachineInfo measure_machine(int threads);

// Korthikanti et al. (2022)'s activation bytes of the config's blocks (no dropout), for its
// dtype and recompute policy (docs/metrics.md); what the arena's peak is compared with.
double activation_estimate_bytes(const Config& c);
// Counts for people: 950 -> "950", 13110 -> "13.1k", 10.75e6 -> "10.75M".
std::string human_count(double x);

// Shares of the step, in % (0..100) of the summed step time of the steady steps.
struct StepShares {
  double data = 0, forward = 0, backward = 0, recompute = 0, optimizer = 0, comm_exposed = 0,
         other = 0, comm = 0;
  double recompute_of_backward = 0;  // recompute in % of backward
  double compute = 0;                // forward + backward + optimizer
};

// One forward matrix product C[M,N] = A[M,K] B[K,N], fp32, A and B read and C written once.
struct RooflineRow {
  std::string name;
  int64_t m = 0, k = 0, n = 0;
  int64_t count = 0;             // times it runs in one micro-batch forward
  double flops = 0;              // 2MKN
  double bytes = 0;              // 4(MK + KN + MN)
  double intensity = 0;          // FLOP/byte
  double attainable_gflops = 0;  // min(peak, intensity x bandwidth); 0 if bandwidth unknown
  std::string bound;             // "compute" | "bandwidth" | "unknown"
};

// 1-bit Adam: one stage's records (all of them, skipped steps included).
struct OneBitStageStats {
  int steps = 0;
  double step_ms_p50 = 0;
  double sent_bytes_p50 = 0;         // comm_sent_bytes per rank per step
  double compression_error_p50 = 0;  // NaN in the warm-up
};

// A fired diagnosis rule: its id (docs/logs.md), the numbers that fired it, what to try.
struct Finding {
  std::string id;
  std::string evidence;
  std::string advice;
};

struct ReportData {
  std::string run_dir;
  std::vector<std::string> warnings;  // skipped last line, missing summary/config, ...

  int steps = 0;            // step records read
  int warmup_excluded = 0;  // leading records left out
  int steady_steps = 0;
  int first_steady_step = 0, last_step = 0;  // their `step` numbers
  int world = 1;
  int threads = 0;  // per rank, 0 = unknown

  double step_ms_p50 = 0, step_ms_p90 = 0, step_ms_p99 = 0;
  double spread = 0;  // (p90 - p50) / p50
  StepShares pct;
  double overlap = 0;  // 1 - comm_exposed / comm; NaN when nothing was communicated

  double tokens_per_step = 0;  // global, all ranks
  double tokens_per_s = 0;     // tokens_per_step at the p50 step
  double model_gflops = 0;     // per rank, at the p50 step
  double peak_gflops = 0;      // per rank, from summary.json or the step records
  double mfu = 0;

  int skipped_steps = 0;
  double skipped_pct = 0;  // of all step records

  double final_loss = 0;
  double final_val_loss = 0;  // NaN when unknown
  double entropy_floor = 0;   // NaN when unknown (not synthetic data)
  double loss_gap = 0;        // val (else final) - floor; NaN when the floor is unknown

  std::vector<int> slowest_count;  // per rank: steady steps it was the slowest
  int slowest_rank = -1;           // rank slowest most often; -1 for one rank
  double slowest_frac = 0;         // its share of the steady steps
  double max_over_median = 1;      // median over steady steps of step_ms_max / step_ms_median

  uint64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0, activations_peak_bytes = 0;
  // Korthikanti et al. 2022's activations of the n_layers blocks as ringstep saves them (no
  // dropout), for the config's dtype and recompute policy (docs/metrics.md); 0 without
  // config.yaml.
  double activations_estimate_bytes = 0;
  double memory_limit_bytes = 0;  // physical RAM / world; 0 = unknown

  bool onebit = false;                              // records carry a 1-bit Adam stage
  std::array<OneBitStageStats, 2> onebit_stages{};  // indexed by OneBitStage
  double onebit_volume_ratio = 0;  // compressed / warm-up sent bytes; NaN if a stage is missing
  bool has_config = false;
  Config config;  // RUN_DIR/config.yaml when has_config
  MachineInfo machine;
  double machine_balance = 0;  // peak GFLOP/s / bandwidth GB/s, FLOP/byte; 0 = unknown
  int64_t roofline_rows = 0;   // N = micro_batch x seq_len
  std::vector<RooflineRow> roofline;

  std::vector<Finding> findings;
  std::vector<std::string> fired() const;  // the findings' ids, in rule order
};

// Reads RUN_DIR and computes every number and rule. Throws InputError for a missing
// directory or steps.jsonl, no step records, or an invalid line before the last one; a
// partly written last line is skipped and noted in warnings.
ReportData analyze(const std::string& run_dir, const MachineInfo& machine = {});

// The matrix products of one micro-batch forward of MODEL at MICRO_BATCH sequences, judged
// against PEAK_GFLOPS and BANDWIDTH_GBS (0 = unknown).
std::vector<RooflineRow> roofline(const ModelConfig& model, int micro_batch, double peak_gflops,
                                  double bandwidth_gbs);

std::string report_text(const ReportData& r);
std::string report_json(const ReportData& r);  // one object, pretty-printed

// `ringstep report RUN_DIR [--json]`: measures the machine, analyzes, prints warnings on
// stderr and the report on stdout. Returns the exit code (0); throws InputError.
int run_report(const std::string& run_dir, bool json_out);

}  // namespace ringstep
