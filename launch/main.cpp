// `ringstep`: the command line (docs/design.md "The command"). Bad input of any kind — flags,
// configs, data files — prints one message and exits with code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/cpu/blas_env.h"
#include "core/error.h"
#include "launch/commands.h"
#include "launch/version.h"
#include "train/report.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace ringstep;
  select_runtime_env(argc, argv);
  CLI::App app{
      "ringstep: a distributed training performance framework (GPT, ring AllReduce, "
      "profiler)"};
  app.require_subcommand(1);
  app.footer("Each command's options: ringstep COMMAND --help (docs/design.md, \"The command\").");
  app.set_version_flag("--version", version_line, "Print the version and the build, and exit");

  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  int dry_run_ranks = 0;
  CLI::App* train_cmd = app.add_subcommand("train", "Train a GPT from a YAML config");
  train_cmd->add_option("config", config_path, "Experiment config (YAML)")->required();
  train_cmd
      ->add_option("--set", overrides,
                   "Override a config key (VALUE is YAML), repeatable: --set train.lr=1e-3 "
                   "--set model.n_layers=8")
      ->type_name("KEY=VALUE");
  CLI::Option* dry_run_flag = train_cmd->add_flag(
      "--dry-run", dry_run,
      "Check the config, print it with the run's memory, FLOPs and batch, and exit "
      "(starts no MPI, writes nothing)");
  train_cmd
      ->add_option("--ranks", dry_run_ranks,
                   "With --dry-run: the world size to assume (default: the launcher's)")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 20).description(""))
      ->needs(dry_run_flag);
  train_cmd->footer(
      "Every config key, its default and range: docs/configs.md. What a run prints and "
      "writes: docs/logs.md.");

  std::string prep_in, prep_out;
  CLI::App* prep_cmd = app.add_subcommand("prepare", "Turn a text file into byte-level tokens");
  prep_cmd->add_option("--input", prep_in, "Text file, one token per byte")
      ->type_name("FILE")
      ->required();
  prep_cmd->add_option("--output", prep_out, "Token file to write (docs/formats.md)")
      ->type_name("FILE")
      ->required();

  std::string report_dir;
  bool report_json = false;
  CLI::App* report_cmd = app.add_subcommand("report", "Summarise and diagnose a run directory");
  report_cmd->add_option("run_dir", report_dir, "Run directory (run.out_dir)")->required();
  report_cmd->add_flag("--json", report_json, "Print one JSON object instead of text");

  std::string trace_dir, trace_out;
  CLI::App* trace_cmd = app.add_subcommand(
      "trace", "Merge the ranks' traces into one clock-aligned timeline (Perfetto)");
  trace_cmd->add_option("run_dir", trace_dir, "Run directory (run.out_dir)")->required();
  trace_cmd->add_option("--output", trace_out, "The merged trace (default RUN_DIR/trace/all.json)")
      ->type_name("FILE");

  std::string export_path, export_out;
  CLI::App* export_cmd =
      app.add_subcommand("export", "Write a checkpoint's weights as safetensors (GPT-2 names)");
  export_cmd->add_option("path", export_path, "Run directory or checkpoint directory")->required();
  export_cmd->add_option("--output", export_out, "The .safetensors file to write")
      ->type_name("FILE")
      ->required();

  PlanCommand plan;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "Predict a config's step at any scale, fit the model to a run, or check a run");
  CLI::Option* plan_config =
      plan_cmd->add_option("config", plan.config, "Experiment config (YAML) to predict");
  CLI::Option* plan_check =
      plan_cmd->add_option("--check", plan.check_dir, "Predict this finished run and compare")
          ->type_name("RUN_DIR");
  CLI::Option* plan_calibrate =
      plan_cmd
          ->add_option("--calibrate", plan.calibrate_dirs,
                       "Fit the CPU's per-op-class efficiencies to these runs' op-timed steps "
                       "(the median of each run's fit)")
          ->type_name("RUN_DIR...");
  plan_config->excludes(plan_check)->excludes(plan_calibrate);
  plan_check->excludes(plan_calibrate);
  plan_cmd->add_option("--set", plan.overrides, "Override a config key, repeatable")
      ->type_name("KEY=VALUE")
      ->needs(plan_config);
  plan_cmd->add_option("--ranks", plan.ranks, "Data-parallel ranks (default 1)")
      ->type_name("N")
      ->check(CLI::Range(1, 1 << 24).description(""))
      ->needs(plan_config);
  plan_cmd->add_option("--gpus-per-node", plan.gpus_per_node, "Ranks per node (default: all)")
      ->type_name("G")
      ->check(CLI::Range(1, 1 << 16).description(""))
      ->needs(plan_config);
  plan_cmd
      ->add_option("--tensor-parallel", plan.tensor_parallel,
                   "Model as Megatron: T ranks of a node split each block (default 1)")
      ->type_name("T")
      ->check(CLI::Range(1, 1 << 16).description(""))
      ->needs(plan_config);
  plan_cmd
      ->add_option("--pipeline-parallel", plan.pipeline_parallel,
                   "Model as Megatron: P pipeline stages of the blocks (default 1)")
      ->type_name("P")
      ->check(CLI::Range(1, 1 << 16).description(""))
      ->needs(plan_config);
  plan_cmd
      ->add_option("--virtual-stages", plan.virtual_stages,
                   "Interleaved 1F1B: V chunks per pipeline stage (default 1)")
      ->type_name("V")
      ->check(CLI::Range(1, 1 << 16).description(""))
      ->needs(plan_config);
  plan_cmd
      ->add_flag("--distributed-optimizer", plan.distributed_optimizer,
                 "Model the optimizer sharded over the data-parallel replicas (ZeRO-1)")
      ->needs(plan_config);
  plan_cmd
      ->add_flag("--tp-comm-overlap", plan.tp_comm_overlap,
                 "Model tensor-parallel collectives hidden under their products (Transformer "
                 "Engine's tp-comm-overlap)")
      ->needs(plan_config);
  plan_cmd
      ->add_option("--link-gbps", plan.link_gbps,
                   "The inter-node link (one node: the link) at B Gb/s per rank")
      ->type_name("B")
      ->check(CLI::Range(1e-6, 1e7).description(""))
      ->needs(plan_config);
  plan_cmd->add_option("--device", plan.device, "cpu (default), h100-sxm or h200-sxm")
      ->type_name("NAME")
      ->check(CLI::IsMember({"cpu", "h100-sxm", "h200-sxm"}))
      ->needs(plan_config);
  plan_cmd
      ->add_option("--calibration", plan.calibration,
                   "The CPU's efficiencies from `plan --calibrate ... --output FILE`")
      ->type_name("FILE")
      ->excludes(plan_calibrate);
  plan_cmd
      ->add_option("--bench", plan.bench,
                   "Fit the intra-node link to `bench allreduce --json FILE` (algo ring)")
      ->type_name("FILE")
      ->excludes(plan_calibrate);
  plan_cmd->add_option("--output", plan.output, "With --calibrate: also write the JSON here")
      ->type_name("FILE")
      ->needs(plan_calibrate);
  plan_cmd->add_flag("--json", plan.json, "Print one JSON object");
  plan_cmd->footer("The model, its assumptions and its validation: docs/plan.md.");

  BenchCommand bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "Micro-benchmarks, under mpirun (bench allreduce: a bandwidth table)");
  bench_cmd->require_subcommand(1);
  add_bench_subcommands(*bench_cmd, bench);

  // CLI11 would only say "a subcommand is required"; name the word it did not know.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == argv[1];
    }
    if (!known) {
      std::fprintf(stderr, "ringstep: unknown subcommand '%s' (expected one of: %s)\n", argv[1],
                   names.c_str());
      return kExitBadInput;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitBadInput;
  }

  try {
    if (*train_cmd && dry_run) return run_train_dry_run(config_path, overrides, dry_run_ranks);
    if (*train_cmd) return run_train(config_path, overrides, argc, argv);
    if (*prep_cmd) return run_prepare(prep_in, prep_out);
    if (*bench_cmd) return run_bench(bench, argc, argv);
    if (*report_cmd) return run_report(report_dir, report_json);
    if (*plan_cmd) {
      if (plan.config.empty() && plan.check_dir.empty() && plan.calibrate_dirs.empty())
        throw InputError("plan: give a CONFIG, --check RUN_DIR or --calibrate RUN_DIR");
      return run_plan(plan);
    }
    if (*export_cmd) return run_export(export_path, export_out);
    if (*trace_cmd) return run_trace(trace_dir, trace_out);
  } catch (const AlreadyReported& e) {
    return e.code;
  } catch (const InputError& e) {
    std::fprintf(stderr, "ringstep: error: %s\n", e.what());
    return kExitBadInput;
  } catch (const SystemFault& e) {
    std::fprintf(stderr, "ringstep: fault of the machine: %s\n", e.what());
    return kExitSystemFault;
  } catch (const TrainingStopped& e) {
    std::fprintf(stderr, "ringstep: training stopped: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringstep: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
