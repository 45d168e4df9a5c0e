// The experiment config: a YAML file checked against one schema (defaults, types, ranges),
// plus `--set a.b=VALUE` overrides checked against the same schema. Every error is an
// InputError naming the file, line and column, the key and what was expected, and for an
// unknown key the nearest valid one ("did you mean ...?"). Enum keys are decoded once, at
// load, into the enums below; each has one name table (core/enum_names.h). A value the
// schema marks "not built yet" is refused at load, so a Config read from YAML never holds
// one; one built in code is the caller's business.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/enum_names.h"

namespace ringstep {

// The enum-valued keys. A table's first entry is not necessarily the key's default.
enum class DataSourceKind { synthetic, file };
constexpr auto enum_names(DataSourceKind) {
  return std::to_array<EnumName<DataSourceKind>>(
      {{DataSourceKind::synthetic, "synthetic"}, {DataSourceKind::file, "file"}});
}
// The layout of token files (docs/formats.md): auto_ tells each file's by its magic.
enum class DataFormat { auto_, ringstep, llmc };
constexpr auto enum_names(DataFormat) {
  return std::to_array<EnumName<DataFormat>>({{DataFormat::auto_, "auto"},
                                              {DataFormat::ringstep, "ringstep"},
                                              {DataFormat::llmc, "llmc"}});
}
enum class LrScheduleKind { cosine, linear, constant };
constexpr auto enum_names(LrScheduleKind) {
  return std::to_array<EnumName<LrScheduleKind>>({{LrScheduleKind::cosine, "cosine"},
                                                  {LrScheduleKind::linear, "linear"},
                                                  {LrScheduleKind::constant, "constant"}});
}
// auto_: dynamic for fp16, else none (optim/loss_scaler.h resolves it). The trailing _
// keeps clear of the C++ keywords.
enum class LossScaleMode { auto_, dynamic, static_, none };
constexpr auto enum_names(LossScaleMode) {
  return std::to_array<EnumName<LossScaleMode>>({{LossScaleMode::auto_, "auto"},
                                                 {LossScaleMode::dynamic, "dynamic"},
                                                 {LossScaleMode::static_, "static"},
                                                 {LossScaleMode::none, "none"}});
}
// Which blocks rebuild their activations in backward (models/gpt.h).
enum class RecomputePolicy { none, full, every_k, selective };
constexpr auto enum_names(RecomputePolicy) {
  return std::to_array<EnumName<RecomputePolicy>>({{RecomputePolicy::none, "none"},
                                                   {RecomputePolicy::full, "full"},
                                                   {RecomputePolicy::every_k, "every_k"},
                                                   {RecomputePolicy::selective, "selective"}});
}
// What a non-finite loss or gradient does when no loss scaler is there to absorb it.
enum class OnNan { stop, skip };
constexpr auto enum_names(OnNan) {
  return std::to_array<EnumName<OnNan>>({{OnNan::stop, "stop"}, {OnNan::skip, "skip"}});
}
enum class OptimizerKind { adamw, onebit_adam, zero_one_adam };
constexpr auto enum_names(OptimizerKind) {
  return std::to_array<EnumName<OptimizerKind>>({{OptimizerKind::adamw, "adamw"},
                                                 {OptimizerKind::onebit_adam, "onebit_adam"},
                                                 {OptimizerKind::zero_one_adam, "zero_one_adam"}});
}
// Whether 1-bit Adam compresses after its warm-up: auto measures, in the warm-up, what the
// uncompressed exchange costs and what compressing would, and compresses only where it pays.
enum class OneBitCompress { auto_, always, never };
constexpr auto enum_names(OneBitCompress) {
  return std::to_array<EnumName<OneBitCompress>>({{OneBitCompress::auto_, "auto"},
                                                  {OneBitCompress::always, "always"},
                                                  {OneBitCompress::never, "never"}});
}
enum class OneBitScale { mean_abs, l2 };
constexpr auto enum_names(OneBitScale) {
  return std::to_array<EnumName<OneBitScale>>(
      {{OneBitScale::mean_abs, "mean_abs"}, {OneBitScale::l2, "l2"}});
}
enum class CommBackend { mpi, nccl };
constexpr auto enum_names(CommBackend) {
  return std::to_array<EnumName<CommBackend>>(
      {{CommBackend::mpi, "mpi"}, {CommBackend::nccl, "nccl"}});
}
// ring = ringstep's own (comm/ring_allreduce.h); native = the transport's.
enum class AllreduceAlgo { ring, native };
constexpr auto enum_names(AllreduceAlgo) {
  return std::to_array<EnumName<AllreduceAlgo>>(
      {{AllreduceAlgo::ring, "ring"}, {AllreduceAlgo::native, "native"}});
}

struct RunConfig {
  std::string name = "tiny";
  std::string out_dir = "runs/tiny";
  uint64_t seed = 1234;
  Device device = Device::cpu;
  int threads = 0;             // 0 = auto (cores / ranks on this node); YAML "auto" or int >= 1
  bool overwrite = false;      // start afresh in an out_dir that holds an earlier run
  double memory_limit_mb = 0;  // 0 = physical RAM / ranks on the node (report's memory rule)

  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 256;
  int seq_len = 128;
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;
  // The embedding and logit rows rounded up to a multiple of this (Megatron's
  // make-vocab-size-divisible-by; GptSpec::vocab_rows); 1 = no padding.
  int pad_vocab_to_multiple = 1;

  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  DataSourceKind source = DataSourceKind::synthetic;
  std::string path;      // token file, or a glob of them, for source=file ("" when null)
  std::string val_path;  // optional held-out token file or glob ("" = tail of path)
  bool shuffle = true;   // token files: a seeded new order of each rank's windows per epoch
  DataFormat format = DataFormat::auto_;

  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  int steps = 600;
  int micro_batch = 8;
  int grad_accum_steps = 2;
  int global_batch = 0;  // 0 = not set; else must equal micro_batch*grad_accum_steps*world
  double lr = 6.0e-3;
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio (cosine/linear)
  int warmup_steps = 30;
  LrScheduleKind schedule = LrScheduleKind::cosine;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = off
  int eval_every = 50;     // 0 = only at the end
  int eval_batches = 16;   // micro-batches per evaluation (16 x 8 x 128 tokens: +-0.01 nats)
  int check_replicas_every = 100;  // 0 = never
  OnNan on_nan = OnNan::stop;      // without loss scaling: stop the run, or skip the step
  std::string init_from;           // weights to start from ("" = random initialisation)

  bool operator==(const TrainConfig&) const = default;
};

// Upper bound of the loss scale (initial, min_scale and dynamic growth): 2^24. The scale
// lifts gradients out of fp16's underflow range (|x| < 2^-24); at S = 2^24 only gradients
// below 2^-48 still underflow while any above 2^-8 overflows fp16's 65504, so a larger
// scale can only cost skipped steps. It also keeps S and 1/S finite, normal floats.
constexpr double kMaxLossScale = 16777216.0;

struct LossScaleConfig {
  LossScaleMode mode = LossScaleMode::auto_;
  double initial = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  int hysteresis = 1;
  double min_scale = 1.0;
  int max_consecutive_skips = 50;

  bool operator==(const LossScaleConfig&) const = default;
};

struct PrecisionConfig {
  DType dtype = DType::f32;  // activations and matrix-product inputs
  bool tf32 = false;         // cuda: fp32 matrix products may use TF32 tensor cores
  LossScaleConfig loss_scale;

  bool operator==(const PrecisionConfig&) const = default;
};

struct RecomputeConfig {
  RecomputePolicy policy = RecomputePolicy::none;
  int k = 2;

  bool operator==(const RecomputeConfig&) const = default;
};

struct OneBitConfig {
  int freeze_step = 60;
  OneBitScale scale = OneBitScale::mean_abs;
  int scale_block = 0;   // elements per scale inside a tensor; 0 = one scale per tensor
  bool overlap = true;  // exchange under backward, clipped by the previous step's norm
  OneBitCompress compress = OneBitCompress::auto_;

  bool operator==(const OneBitConfig&) const = default;
};

// 0/1 Adam's schedules (optim/zero_one_adam.h; DeepSpeed's names).
struct ZeroOneConfig {
  int var_freeze_step = 120;   // the last step that may update the variance
  int var_update_scaler = 8;   // variance updates at one interval before it doubles
  int local_step_scaler = 32;  // frozen steps at one sync interval before it doubles
  int local_step_clipper = 2;  // the longest sync interval, in steps

  bool operator==(const ZeroOneConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::adamw;
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1.0e-8;
  OneBitConfig onebit;
  ZeroOneConfig zero_one;

  bool operator==(const OptimizerConfig&) const = default;
};

struct LinkConfig {
  double bandwidth_gbps = 0.0;  // 0 = no emulation
  double latency_us = 0.0;

  bool operator==(const LinkConfig&) const = default;
};

struct CommConfig {
  CommBackend backend = CommBackend::mpi;
  AllreduceAlgo allreduce = AllreduceAlgo::ring;
  double bucket_mb = 25.0;
  bool overlap = true;
  LinkConfig link;

  bool operator==(const CommConfig&) const = default;
};

struct ProfileConfig {
  bool enabled = true;
  int log_every = 10;
  std::vector<int> trace_steps = {5, 7};  // [first, last] inclusive, or [] for none
  double peak_gflops = 0.0;               // 0 = auto (measured at start); YAML "auto" or > 0
  int op_every = 50;  // time each op on every N-th step and the traced ones; 0 = never
  // Test-only faults for the diagnosis gallery (configs/sick/): a sleep in every step on
  // the last rank (a straggler), and in every micro-batch's data phase (a slow pipeline).
  double inject_delay_ms = 0.0;
  double inject_data_delay_ms = 0.0;

  bool operator==(const ProfileConfig&) const = default;
};

struct CheckpointConfig {
  int every = 0;  // 0 = never
  int keep = 2;
  std::string resume = "auto";  // auto | never | PATH

  bool operator==(const CheckpointConfig&) const = default;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  PrecisionConfig precision;
  RecomputeConfig recompute;
  OptimizerConfig optimizer;
  CommConfig comm;
  ProfileConfig profile;
  CheckpointConfig checkpoint;
  std::string source_path;  // the file it was read from ("" for defaults)

  bool operator==(const Config&) const = default;
};

// A config file larger than this is refused: YAML has no length of its own, and a config is
// a few KiB.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

// Reads PATH (a regular file of at most kMaxConfigBytes), applies OVERRIDES ("a.b=VALUE", VALUE
// read as YAML) and validates everything that can be checked without knowing the world size. Throws
// InputError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from YAML text (NAME is used in messages in place of the file name).
Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {});
// Checks a Config that code may have changed after loading against the same schema as
// load_config (types, ranges, "not built yet" values, cross-field rules), by reading back
// its effective YAML; messages locate keys in that text ("effective config:LINE:COL").
// Throws InputError.
void check_config(const Config& cfg);
// precision.loss_scale.mode with auto resolved: dynamic for fp16, none for bf16 and fp32
// (both have fp32's 8-bit exponent, so their gradients do not underflow earlier than fp32).
LossScaleMode resolved_loss_scale_mode(const PrecisionConfig& cfg);
// Checks what depends on the world size (the batch invariant). Throws InputError.
void validate_for_world(const Config& cfg, int world_size);
// The effective config (every key, defaults filled in) as YAML text that load_config
// reads back to an equal Config.
std::string config_to_yaml(const Config& cfg);
// Every valid dotted key ("train.lr", "precision.loss_scale.mode", ...), for docs and hints.
std::vector<std::string> config_keys();
// The key reference (one Markdown table per section: key, type, default, range, meaning),
// generated from the schema; docs/configs.md embeds it and a test keeps the two equal.
std::string config_reference_markdown();

}  // namespace ringstep
