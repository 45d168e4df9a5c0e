// `ringstep report RUN_DIR`: reads a run directory (steps.jsonl, summary.json, config.yaml)
// and turns it into step-time percentiles, the breakdown in % of step, throughput and MFU,
// the slowest ranks, a roofline view of the model's matrix products and a diagnosis: rules
// that each cite the numbers that fired them. docs/logs.md defines every number and rule.
// analyze() is pure (no clock, no machine probe) so tests pin its numbers; run_report()
// measures the machine, then prints text or one JSON object.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/op_profile.h"
#include "optim/onebit_adam.h"
#include "train/step_record.h"

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

// The activation arena's peak for one micro-batch of the config (its dtype, recompute policy
// and device), from the model's spec (models/gpt_spec.h): equal to the measured peak in fp32
// on the CPU, below it by the backend's scratch otherwise.
double activation_estimate_bytes(const Config& c);
// Counts for people: 950 -> "950", 13110 -> "13.1k", 10.75e6 -> "10.75M".
std::string human_count(double x);
// Bytes for people, in binary units: MiB below 1 GiB, else GiB, two decimals ("20.00 MiB",
// "1.50 GiB").
std::string human_bytes(double bytes);

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

// One op of the measured roofline: its mean per op-timed step (rank 0's ops), what that
// achieves, and how close it comes to the time its bound allows (docs/metrics.md).
struct OpRow {
  OpPhase phase = OpPhase::forward;
  Op op = Op::qkv;
  double calls = 0, ms = 0, flops = 0, bytes = 0;  // per op-timed step
  double share_pct = 0;                            // of all the ops' time
  double gflops = 0, gbs = 0;                      // achieved GFLOP/s and GB/s
  double intensity = 0;                            // FLOP/byte; 0 for an op without FLOPs
  // max(FLOPs / peak, bytes / bandwidth): the fastest the roofline allows; 0 when the peak
  // or the bandwidth is unknown. bound_frac = bound_ms / ms.
  double bound_ms = 0, bound_frac = 0;
  std::string bound;  // "compute" | "bandwidth" | "unknown"
};

// A fired diagnosis rule: its id (docs/logs.md), the numbers that fired it, what to try,
// and the config changes to try first as `--set` arguments ("key=value"; may be empty when
// no setting addresses the cause).
struct Finding {
  std::string id;
  std::string evidence;
  std::string advice;
  std::vector<std::string> sets;
};

// One rank's link over the run, from summary.json's network facts (comm/net_facts.h):
// NaN or -1 = unknown.
struct RankLink {
  std::string interface;                   // "": no network between this rank and the others
  double link_gbps = NAN, cap_gbps = NAN;  // at the end of the run; cap 0: none
  // What the link carries: the least of a cap above 0 and the link speed; NaN when neither
  // is known. capped: the cap is the lesser.
  double rate_gbps = NAN;
  bool capped = false;
  // Changes over the run (end - start): TCP in the rank's network namespace, and the
  // interface's counters (dropped and errors: tx + rx).
  int64_t tcp_out_segs = -1, tcp_retrans_segs = -1;
  int64_t tx_bytes = -1, rx_bytes = -1, dropped = -1, errors = -1;
};

// Communication numbers the rules reason from (steady steps; 0 or NaN = unknown).
struct CommFacts {
  int buckets = 0;                   // gradient buckets of the config's model at comm.bucket_mb
  double grad_mib = 0;               // gradient buffer
  double exposed_ms = 0;             // median over steps of the least comm_exposed of any rank
  double busbw_gbs = 0;              // median achieved bus bandwidth (docs/metrics.md)
  double link_gbs = 0;               // comm.link.bandwidth_gbps / 8; 0 = not emulated
  std::vector<int> straggler_count;  // per rank: steady steps that named it a straggler
  double busy_ms_max = 0, busy_ms_median = 0;  // medians over the steady steps
  std::vector<RankLink> links;  // per rank; empty without network facts in summary.json
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
  double peak_gflops_end = 0;  // summary.json's end-of-run measurement (information); 0 = none
  double mfu = 0;              // throughput() of train/step_record.h, as the records' and summary's

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
  // activation_estimate_bytes of the run's config; 0 without config.yaml.
  double activations_estimate_bytes = 0;
  double memory_limit_bytes = 0;  // physical RAM / world; 0 = unknown

  bool onebit = false;  // records carry a compressed optimizer's stage
  // Indexed by OneBitStage.
  std::array<OneBitStageStats, enum_names(OneBitStage{}).size()> onebit_stages{};
  double onebit_volume_ratio = 0;  // compressed / warm-up sent bytes; NaN if a stage is missing
  std::optional<CompressChoice> compress_choice;  // summary.json's compress: auto decision
  double onebit_sent_bytes = 0;    // comm_sent_bytes per rank, summed over every record
  bool has_config = false;
  Config config;  // RUN_DIR/config.yaml when has_config
  MachineInfo machine;
  double machine_balance = 0;  // peak GFLOP/s / bandwidth GB/s, FLOP/byte; 0 = unknown
  int64_t roofline_rows = 0;   // N = micro_batch x seq_len
  std::vector<RooflineRow> roofline;
  int op_steps = 0;        // records with ops the measured roofline averages
  std::vector<OpRow> ops;  // the measured roofline, longest first
  CommFacts comm;
  // `ringstep plan --check`'s prediction of the run from its config (CPU runs with a config),
  // next to the measured p50 step (1-bit Adam: the compressed stage's).
  struct PlanCheck {
    bool known = false;
    double step_ms = 0, compute_ms = 0, comm_exposed_ms = 0, measured_step_ms = 0;
  } plan;

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

// The measured roofline of the records' ops (steady ones with ops, else any), against
// PEAK_GFLOPS and BANDWIDTH_GBS (0 = unknown); sets r.ops and r.op_steps.
void measured_roofline(const std::vector<StepRecord>& recs, double peak_gflops,
                       double bandwidth_gbs, ReportData& r);
// Gradient buckets GradSync makes for MODEL at BUCKET_MB (train/grad_sync.h, make_buckets).
int gradient_buckets(const ModelConfig& model, double bucket_mb);
// Fires the diagnosis rules on R's numbers (train/report_rules.cpp; docs/logs.md).
void run_rules(ReportData& r);

std::string report_text(const ReportData& r);
std::string report_json(const ReportData& r);  // one object, pretty-printed

// `ringstep report RUN_DIR [--json]`: measures the machine (on the run's threads, at most
// this machine's), analyzes, prints warnings on stderr and the report on stdout. Returns the
// exit code (0); throws InputError for every bad input, naming the file and the field.
int run_report(const std::string& run_dir, bool json_out);

}  // namespace ringstep
