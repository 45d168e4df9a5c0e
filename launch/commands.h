// The subcommands behind launch/main.cpp, one function each, so main stays a table of
// flags. Each returns the process exit code; bad input throws InputError (exit 2).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ringstep {

struct BenchCommand {
  std::string which;  // "allreduce"
  std::string backend = "mpi";
  std::string algos = "ring,native";
  std::string min_size = "1K", max_size = "64M", dtype = "fp32", json_path;
  int factor = 4, iters = 0, warmup = 0;
};

struct PlanCommand {
  std::string config;                       // CONFIG to predict, or
  std::string check_dir;                    // --check RUN_DIR
  std::vector<std::string> calibrate_dirs;  // --calibrate RUN_DIR...
  std::vector<std::string> overrides;
  int ranks = 1, gpus_per_node = 0;                                    // 0: all ranks on one node
  int tensor_parallel = 1, pipeline_parallel = 1, virtual_stages = 1;  // train/plan.h
  bool distributed_optimizer = false, tp_comm_overlap = false;
  double link_gbps = 0;  // 0: the device's links
  std::string device;    // "" = cpu
  std::string calibration, bench, output;
  bool json = false;
};
// `ringstep plan` (train/plan.h, docs/plan.md): CONFIG's step predicted on RANKS of DEVICE;
// --calibrate RUN_DIR... prints (and with OUTPUT writes) the efficiencies fitted from runs
// (the median of each run's fit);
// --check RUN_DIR predicts a finished run and prints the error per field.
int run_plan(const PlanCommand& opts);

void add_bench_subcommands(CLI::App& bench, BenchCommand& opts);
int run_train(const std::string& config_path, const std::vector<std::string>& overrides, int argc,
              char** argv);
// `ringstep train CONFIG --dry-run [--ranks N]`: checks CONFIG as `train` does (exit 2 with
// the same messages), then prints, on rank 0 only, the effective config and what a run of it
// would need (launch/dry_run.cpp). Starts no MPI, builds nothing, writes nothing. RANKS 0 =
// the world size of the launcher's environment (1 without one).
int run_train_dry_run(const std::string& config_path, const std::vector<std::string>& overrides,
                      int ranks);
int run_prepare(const std::string& input, const std::string& output);
// `ringstep export RUN_DIR|CHECKPOINT --output FILE`: the checkpoint's weights as
// safetensors under GPT-2 names (train/export.h).
int run_export(const std::string& path, const std::string& output);
// `ringstep trace RUN_DIR [--output FILE]`: the ranks' traces as one timeline
// (train/trace_merge.h); OUTPUT "" = RUN_DIR/trace/all.json.
int run_trace(const std::string& run_dir, const std::string& output);
int run_bench(const BenchCommand& opts, int argc, char** argv);

}  // namespace ringstep
