// One optimizer step as a line of steps.jsonl (docs/logs.md): the one home of the record's
// schema, one list of fields (step_record.cpp) that both the writer and the reader walk
// (train/json_fields.h). The trainer fills a StepRecord and writes it with record_line; the
// gradient sync fills its `ranks` block from every rank's PhaseTimes; `ringstep report`
// reads it back with step_record_from_json. The phase names come from core/profiler.h's
// kPhaseFields. Also here: the definitions of MFU and bus bandwidth that the record, the
// summary and the report share.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/op_profile.h"
#include "core/profiler.h"
#include "optim/onebit_adam.h"

namespace ringstep {

// A rank is a straggler when its busy time (step - comm_exposed) is at least this times
// the lower median over ranks for kStragglerSteps steps in a row; the report's rule uses
// the same ratio on step_ms_max / step_ms_median.
inline constexpr double kStragglerRatio = 1.10;
inline constexpr int kStragglerSteps = 3;

// A world or thread count above this in a run's files is damage, not a run (the report
// sizes per-rank tables by it).
inline constexpr int64_t kMaxWorld = int64_t{1} << 20;

// A value's spread over the ranks of one step.
struct Spread {
  double min = 0, median = 0, max = 0;
};

// What rank 0 learns about one step from every rank (the record's `ranks` object).
struct RanksBlock {
  int world = 0;  // 0: the record has no ranks block
  Spread step_ms;
  int slowest = -1;                                    // the rank with the longest step
  std::array<Spread, kPhaseFields.size()> phase_ms{};  // indexed like kPhaseFields
  double busy_ms_median = 0;  // lower median (with 2 ranks: the faster one)
  double busy_ms_max = 0;
  int straggler = -1;  // -1: none (null in JSON)
};

struct MemBytes {
  uint64_t params = 0, grads = 0, optimizer = 0, activations_peak = 0;
};

struct StepRecord {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  int step = 0;  // 1-based
  double loss = 0;
  double val_loss = kNaN;  // NaN: no evaluation at this step (key left out)
  double lr = 0;
  int64_t tokens = 0;       // global tokens of the step, all ranks
  double grad_norm = kNaN;  // NaN: not computed (skipped step; null in JSON)
  double loss_scale = 1;
  bool skipped = false;
  PhaseTimes time_ms;  // the slowest rank's phases
  RanksBlock ranks;
  double tokens_per_s = 0;
  double model_gflops = 0;  // per rank
  double mfu = 0;
  double hardware_gflops = 0;    // per rank, recomputed forward included
  uint64_t comm_bytes = 0;       // payload reduced (fp32 bytes of the buffers)
  uint64_t comm_sent_bytes = 0;  // what rank 0 put on the links (docs/logs.md)
  double comm_busbw_gbs = 0;
  std::optional<OneBitStage> stage;  // 1-bit Adam runs only (key left out otherwise)
  double compression_error = kNaN;   // ||z - s sign z|| / ||z|| over ranks; NaN: none (left out)
  MemBytes mem_bytes;
  OpProfile ops;  // rank 0's ops on op-timed steps (profile.op_every); empty otherwise
  double time_unix = 0;  // when rank 0 wrote the record: seconds since 1970-01-01 UTC
};

nlohmann::ordered_json to_json(const StepRecord& r);
// The record as one line of steps.jsonl (no newline): numbers rounded as docs/logs.md says
// and written with no more digits than that.
std::string record_line(const StepRecord& r);
// Reads one record; WHERE ("run/steps.jsonl:12") prefixes errors. Throws InputError naming
// the field for a missing field, a wrong type, a value out of range (a negative time, a
// null where a number is needed) or a key the record does not have. Fields that later
// versions added (docs/logs.md) may be absent and keep StepRecord's defaults.
StepRecord step_record_from_json(const nlohmann::json& j, const std::string& where);

// The dotted names of the fields a record can have ("time_ms.step", "ranks.phase_ms",
// "ops"), in the order they are written: what docs/logs.md's table must list.
std::vector<std::string> step_record_field_names();

// What one step of STEP_MS milliseconds that trains TOKENS tokens (all ranks) at
// FLOPS_PER_TOKEN model FLOPs each achieves on each of WORLD ranks whose peak is PEAK_GFLOPS
// (docs/metrics.md "MFU"). The step records, the summary and the report all call this.
struct Throughput {
  double tokens_per_s = 0;
  double model_gflops = 0;  // per rank
  double mfu = 0;
};
Throughput throughput(double tokens, double step_ms, double flops_per_token, int world,
                      double peak_gflops);
// Model FLOPs utilization: MODEL_GFLOPS / PEAK_GFLOPS, both per rank; 0 when the peak is
// unknown (a GPU the peak table lacks). PEAK_GFLOPS is the run's one peak: profile.peak_gflops
// or the one measured at start, never the end-of-run measurement (docs/metrics.md says why).
double model_flops_utilization(double model_gflops, double peak_gflops);

// nccl-tests' bus bandwidth of an AllReduce of BYTES in MS milliseconds over WORLD ranks, in
// GB/s: algbw x allreduce_busbw_factor (comm/bench.h, docs/metrics.md); 0 when nothing was
// timed.
double busbw_gbs(uint64_t bytes, double ms, int world);

}  // namespace ringstep
