// The experiment config: a YAML file checked against one schema (defaults, types, ranges),
// plus `--set a.b=VALUE` overrides checked against the same schema. Every error is an
// InputError naming the file, line and column, the key and what was expected, and for an
// unknown key the nearest valid one ("did you mean ...?").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ringstep {

struct RunConfig {
  std::string name = "tiny";
  std::string out_dir = "runs/tiny";
  uint64_t seed = 1234;
  std::string device = "cpu";  // cpu | cuda
  int threads = 0;             // 0 = auto (cores / ranks on this node); YAML "auto" or int >= 1

  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  int vocab_size = 256;
  int seq_len = 128;
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;

  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | file
  std::string path;                  // token file for source=file ("" when null)
  std::string val_path;              // optional held-out token file ("" = tail of path)

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
  std::string schedule = "cosine";  // cosine | linear | constant
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 = off
  int eval_every = 50;     // 0 = only at the end
  int eval_batches = 16;  // micro-batches per evaluation (16 x 8 x 128 tokens: +-0.01 nats)
  int check_replicas_every = 100;  // 0 = never

  bool operator==(const TrainConfig&) const = default;
};

// Upper bound of the loss scale (initial, min_scale and dynamic growth): 2^24. The scale
// lifts gradients out of fp16's underflow range (|x| < 2^-24); at S = 2^24 only gradients
// below 2^-48 still underflow while any above 2^-8 overflows fp16's 65504, so a larger
// scale can only cost skipped steps. It also keeps S and 1/S finite, normal floats.
constexpr double kMaxLossScale = 16777216.0;

struct LossScaleConfig {
  std::string mode = "auto";  // auto | dynamic | static | none (auto: dynamic for fp16, else none)
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
  std::string dtype = "fp32";  // fp32 | bf16 | fp16
  LossScaleConfig loss_scale;

  bool operator==(const PrecisionConfig&) const = default;
};

struct RecomputeConfig {
  std::string policy = "none";  // none | full | every_k | selective
  int k = 2;

  bool operator==(const RecomputeConfig&) const = default;
};

struct OneBitConfig {
  int freeze_step = 60;
  std::string scale = "mean_abs";  // mean_abs | l2

  bool operator==(const OneBitConfig&) const = default;
};

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | onebit_adam
  std::array<double, 2> betas = {0.9, 0.95};
  double eps = 1.0e-8;
  OneBitConfig onebit;

  bool operator==(const OptimizerConfig&) const = default;
};

struct LinkConfig {
  double bandwidth_gbps = 0.0;  // 0 = no emulation
  double latency_us = 0.0;

  bool operator==(const LinkConfig&) const = default;
};

struct CommConfig {
  std::string backend = "mpi";     // mpi | nccl
  std::string allreduce = "ring";  // ring | native
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

// Reads PATH, applies OVERRIDES ("a.b=VALUE", VALUE read as YAML) and validates everything
// that can be checked without knowing the world size. Throws InputError.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same, from YAML text (NAME is used in messages in place of the file name).
Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {});
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
