#include "launch/commands.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "comm/agree.h"
#include "comm/bench.h"
#include "comm/device_comm.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl/nccl_comm.h"
#include "core/checksum.h"
#include "core/config.h"
#include "core/error.h"
#include "core/files.h"
#include "models/gpt.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/export.h"
#include "train/preflight.h"
#include "train/run_dir.h"
#include "train/trace_merge.h"
#include "train/trainer.h"

namespace ringstep {

void add_bench_subcommands(CLI::App& bench, BenchCommand& opts) {
  CLI::App* ar = bench.add_subcommand("allreduce", "AllReduce bandwidth table (nccl-tests style)");
  ar->callback([&opts] { opts.which = "allreduce"; });
  ar->add_option("--backend", opts.backend, "mpi (host buffers) | nccl (device buffers)");
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
  ar->add_option("--json", opts.json_path, "Write one JSON object per row to FILE")
      ->type_name("FILE");
}

namespace {

// Runs CHECK on every rank of WORLD and agrees on its outcome (comm/agree.h) before
// anything else is communicated.
void check_on_every_rank(Communicator& world, const std::function<void()>& check) {
  agree_on_inputs(
      world.rank(),
      [&](uint64_t value) {
        std::vector<uint64_t> all(size_t(world.size()));
        all[size_t(world.rank())] = value;
        world.allgather_bytes(all.data(), sizeof(uint64_t));
        return all;
      },
      check);
}

}  // namespace

int run_train(const std::string& config_path, const std::vector<std::string>& overrides, int argc,
              char** argv) {
  MpiSession mpi(&argc, &argv);
  // Every rank reads and checks its inputs itself (the config, the run directory, whether
  // the model fits this machine, the data files) before the model is built.
  Config cfg;
  {
    MpiCommunicator world(MPI_COMM_WORLD);
    check_on_every_rank(world, [&] {
      cfg = load_config(config_path, overrides);
      validate_for_world(cfg, world.size());
      check_creatable(cfg.run.out_dir);
      check_fits_machine(cfg, machine_limits(cfg.run.device));
      if (cfg.comm.backend == CommBackend::nccl)
        if (const std::string why = nccl::unavailable_reason(); !why.empty())
          throw InputError("comm.backend: nccl is not available: " + why);
      for (const char* split : {"train", "val"})
        make_data_source(cfg, split, world.rank(), world.size());
    });
  }
  MpiCommunicator comm(MPI_COMM_WORLD, cfg.comm.link);
  // comm.backend nccl: one NCCL communicator for the job, made before the model's memory.
  std::unique_ptr<DeviceComm> device_comm;
  if (cfg.comm.backend == CommBackend::nccl)
    device_comm = make_nccl_device_comm(comm, EngineOptions{}.timeout_s);
  train(cfg, comm.size() > 1 ? &comm : nullptr, device_comm.get());
  return 0;
}

int run_prepare(const std::string& input, const std::string& output) {
  prepare_tokens(input, output);
  std::printf("ringstep prepare: wrote %s\n", output.c_str());
  return 0;
}

namespace {

// The step of a checkpoint directory named step-N.
int64_t checkpoint_step(const std::string& dir) {
  return std::stoll(std::filesystem::path(dir).filename().string().substr(5));
}

}  // namespace

int run_export(const std::string& path, const std::string& output) {
  if (output.empty()) throw InputError("export: --output is empty; name the .safetensors file");
  try {
    // A finished run's own weights (final.safetensors), unless a checkpoint is newer.
    const std::string final_weights = path + "/" + kFinalWeights;
    if (std::filesystem::is_directory(path) && std::filesystem::exists(final_weights)) {
      const std::string newest = newest_checkpoint(path + "/checkpoints", true);
      const int64_t step = safetensors_step(final_weights);
      if (newest.empty() || step >= checkpoint_step(newest)) {
        write_file_atomic(output, read_regular_file(final_weights, kNoSizeLimit, "final weights"));
        std::printf("ringstep export: %s (step %lld) -> %s\n", final_weights.c_str(),
                    static_cast<long long>(step), output.c_str());
        return 0;
      }
    }
    const std::string dir = checkpoint_at(path);
    const Config cfg = load_config(dir + "/config.yaml");
    Gpt model(cfg.model, {cfg.precision.dtype, cfg.recompute.policy, cfg.recompute.k});
    load_checkpoint_params(dir, cfg, model.params());
    export_safetensors(model, output);
    std::printf("ringstep export: %s (%zu parameters) -> %s\n", dir.c_str(), model.param_count(),
                output.c_str());
  } catch (const SystemFault& e) {
    throw InputError("export: " + std::string(e.what()));  // the --output named is the user's
  }
  return 0;
}

int run_trace(const std::string& run_dir, const std::string& output) {
  const std::string out = output.empty() ? run_dir + "/trace/all.json" : output;
  const int ranks = merge_traces(run_dir, out);
  std::printf("ringstep trace: %d rank%s, clocks aligned -> %s (open it in ui.perfetto.dev)\n",
              ranks, ranks == 1 ? "" : "s", out.c_str());
  return 0;
}

int run_bench(const BenchCommand& opts, int argc, char** argv) {
  AllreduceBenchOptions o;
  o.backend = parse_name<CommBackend>(opts.backend, "--backend");
  o.algos = parse_allreduce_algos(opts.algos);
  o.min_bytes = parse_size_bytes(opts.min_size);
  o.max_bytes = parse_size_bytes(opts.max_size);
  o.factor = opts.factor;
  o.dtype = parse_dtype(opts.dtype);
  o.iters = opts.iters;
  o.warmup = opts.warmup;
  o.json_path = opts.json_path;
  bench_sizes(o.min_bytes, o.max_bytes, o.factor);  // bad ranges fail before MPI starts
  MpiSession mpi(&argc, &argv);
  return run_allreduce_bench(o);
}

}  // namespace ringstep
