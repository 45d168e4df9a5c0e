#include "launch/commands.h"

#include <cstdio>

#include "core/config.h"
#include "core/error.h"
#include "train/data.h"
#include "train/trainer.h"

namespace ringstep {

void add_bench_subcommands(CLI::App& bench, BenchCommand& opts) {
  CLI::App* ar = bench.add_subcommand("allreduce", "AllReduce bandwidth table (nccl-tests style)");
  ar->callback([&opts] { opts.which = "allreduce"; });
  ar->add_option("--algo", opts.algos, "Algorithms, comma-separated: ring,native");
  ar->add_option("-b,--minbytes", opts.min_size, "Smallest size (e.g. 1K)");
  ar->add_option("-e,--maxbytes", opts.max_size, "Largest size (e.g. 64M)");
  ar->add_option("-f,--stepfactor", opts.factor, "Size multiplier between rows")
      ->check(CLI::Range(2, 1024));
  ar->add_option("--dtype", opts.dtype, "fp32 | fp16 | bf16");
  ar->add_option("--iters", opts.iters, "Timed iterations per size (0 = by size)")
      ->check(CLI::NonNegativeNumber);
  ar->add_option("--warmup", opts.warmup, "Warm-up iterations per size (0 = by size)")
      ->check(CLI::NonNegativeNumber);
  ar->add_option("--json", opts.json_path, "Write one JSON object per row to FILE");
}

int run_train(const std::string& config_path, const std::vector<std::string>& overrides,
              int argc, char** argv) {
  Config cfg = load_config(config_path, overrides);
  train(cfg, nullptr);
  return 0;
}

int run_prepare(const std::string& input, const std::string& output) {
  prepare_tokens(input, output);
  std::printf("ringstep prepare: wrote %s\n", output.c_str());
  return 0;
}

int run_bench(const BenchCommand& opts, int argc, char** argv) {
  throw InputError("bench " + opts.which + ": not available in this build yet");
}

}  // namespace ringstep
