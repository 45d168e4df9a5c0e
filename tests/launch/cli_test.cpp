// The command line as a user meets it: every bad input exits with code 2, says what is
// wrong, and leaves no run directory behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/cuda/device.h"
#include "core/threads.h"
#include "train/llmc_shard.h"
#include "train/preflight.h"
#include "train/report.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string output;
};

// Runs the shell command CMD: its exit code and what it wrote to stdout.
Result RunShell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Runs `ringstep ARGS` with its stderr going to STDERR ("&1": into the output).
Result RunCli(const std::string& args, const std::string& stderr_to = "&1") {
  return RunShell(std::string(RINGSTEP_BINARY) + " " + args + " 2>" + stderr_to);
}

fs::path Temp(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ringstep_cli_" + name + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string Tiny() { return std::string(RINGSTEP_SOURCE_DIR) + "/configs/tiny.yaml"; }

void ExpectBadInput(const std::string& args, const std::string& fragment, const fs::path& out) {
  Result r = RunCli(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
  EXPECT_FALSE(fs::exists(out / "run")) << args;
}

// run.device cuda where no CUDA device is usable (or in a build without the backend): exit 2
// before anything is written, saying why.
TEST(Cli, CudaWithoutADeviceExitsTwoSayingWhy) {
  if (ringstep::cuda_available()) GTEST_SKIP() << "a CUDA device is usable here";
  fs::path dir = Temp("nocuda");
  const std::string run = " --set run.out_dir=" + (dir / "run").string();
  ExpectBadInput("train " + Tiny() + run + " --set run.device=cuda",
                 "run.device: device cuda is not available", dir);
  ExpectBadInput("train " + Tiny() + run + " --set run.device=cuda --set comm.backend=nccl",
                 "run.device: device cuda is not available", dir);
  fs::remove_all(dir);
}

// `bench allreduce --backend nccl` needs NCCL and a GPU: without them, exit 2 saying which.
TEST(Cli, BenchOnNcclWithoutAGpuExitsTwoSayingWhy) {
  if (ringstep::cuda_available()) GTEST_SKIP() << "a CUDA device is usable here";
  fs::path dir = Temp("noncclgpu");
  ExpectBadInput("bench allreduce --backend nccl -e 4K", "bench: --backend nccl: ", dir);
  ExpectBadInput("bench allreduce --backend tcp -e 4K", "unknown --backend 'tcp'", dir);
  fs::remove_all(dir);
}

TEST(Cli, BadInputsExitWithCodeTwoAndWriteNothing) {
  fs::path dir = Temp("bad");
  const std::string run = " --set run.out_dir=" + (dir / "run").string();
  ExpectBadInput("frobnicate", "frobnicate", dir);
  ExpectBadInput("train", "config", dir);
  ExpectBadInput("train " + Tiny() + " --no-such-flag", "no-such-flag", dir);
  ExpectBadInput("export " + dir.string() + " --output " + (dir / "m.safetensors").string(),
                 "is neither a checkpoint", dir);
  ExpectBadInput("export " + dir.string() + " --output ''", "--output is empty", dir);
  ExpectBadInput("train " + (dir / "missing.yaml").string() + run, "missing.yaml", dir);
  ExpectBadInput("train " + Tiny() + run + " --set train.lrr=1", "did you mean 'train.lr'", dir);
  ExpectBadInput("train " + Tiny() + run + " --set train.steps=abc", "train.steps", dir);
  ExpectBadInput("train " + Tiny() + run + " --set model.n_heads=3", "n_heads", dir);
  ExpectBadInput("train " + Tiny() + run + " --set train.global_batch=7", "global_batch", dir);
  ExpectBadInput("train " + Tiny() + run + " --set comm.backend=nccl", "needs run.device cuda",
                 dir);
  ExpectBadInput(
      "train " + Tiny() + run + " --set optimizer.name=onebit_adam --set optimizer.onebit.scale=l1",
      "got 'l1'; did you mean 'l2'?", dir);
  ExpectBadInput("train " + Tiny() + run + " --set checkpoint.every=-1", "checkpoint.every", dir);
  ExpectBadInput("train " + Tiny() + run + " --set precision.dtype=bf17", "did you mean 'bf16'",
                 dir);
  ExpectBadInput("train " + Tiny() + run + " --set recompute.k=0", "recompute.k", dir);
  ExpectBadInput("train " + Tiny() + run + " --set precision.loss_scale.min_scale=1e6", "min_scale",
                 dir);
  ExpectBadInput("train " + Tiny() + run + " --set precision.loss_scale.backoff_factor=1.5",
                 "backoff_factor", dir);
  ExpectBadInput("train " + Tiny() + run + " --set precision.loss_scale.mode=dynamc", "dynamic",
                 dir);
  ExpectBadInput("train " + Tiny() + run +
                     " --set data.source=file --set data.path=" + (dir / "none.bin").string(),
                 "none.bin", dir);
  ExpectBadInput("train " + Tiny() + run + " --set data.path=nope.bin",
                 "--set data.path: 'data.path' is set but 'data.source' is synthetic", dir);
  ExpectBadInput("train " + Tiny() + run + " --set model.d_model=130",
                 "--set model.d_model: 'model.d_model' (130) must be divisible", dir);
  {
    std::ofstream bad(dir / "bad.yaml");
    bad << "model:\n  d_model: 128\n  n_layerz: 4\n";
  }
  ExpectBadInput("train " + (dir / "bad.yaml").string() + run, "bad.yaml:3:3", dir);
  // A token file whose tokens exceed the model's vocabulary.
  {
    std::ofstream text(dir / "t.txt");
    for (int i = 0; i < 200; ++i) text << "hello world \xff\xfe ";
  }
  ASSERT_EQ(RunCli("prepare --input " + (dir / "t.txt").string() + " --output " +
                   (dir / "t.bin").string())
                .code,
            0);
  ExpectBadInput("train " + Tiny() + run + " --set data.source=file --set model.vocab_size=128" +
                     " --set data.path=" + (dir / "t.bin").string(),
                 "t.bin", dir);
  // Truncated token file.
  fs::resize_file(dir / "t.bin", fs::file_size(dir / "t.bin") - 3);
  ExpectBadInput("train " + Tiny() + run +
                     " --set data.source=file --set data.path=" + (dir / "t.bin").string(),
                 "truncated", dir);
  ExpectBadInput(
      "prepare --input " + (dir / "nope.txt").string() + " --output " + (dir / "x.bin").string(),
      "nope.txt", dir);
  EXPECT_FALSE(fs::exists(dir / "x.bin"));
  fs::remove_all(dir);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Under mpirun a bad input is reported once, not once per rank, and every rank exits 2.
TEST(Cli, ABadInputUnderMpirunIsReportedOnce) {
  fs::path dir = Temp("mpibad");
  const std::string mpirun = std::string(RINGSTEP_MPIEXEC) + " --oversubscribe -np 3 ";
  const std::string cmd = mpirun + RINGSTEP_BINARY + " train " + Tiny() +
                          " --set run.out_dir=" + (dir / "run").string();
  for (const std::string& set :
       {std::string(" --set model.d_model=130"),
        " --set data.source=file --set data.path=" + (dir / "none.bin").string()}) {
    const Result r = RunShell(cmd + set + " 2>&1");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(Count(r.output, "ringstep: error"), 1u) << r.output;
    EXPECT_FALSE(fs::exists(dir / "run")) << set;
  }
  fs::remove_all(dir);
}

// Every rank reads the checkpoint it resumes from; one that does not verify is still
// reported once, and the new run's directory is not made.
TEST(Cli, ABadCheckpointUnderMpirunIsReportedOnce) {
  fs::path dir = Temp("mpickpt");
  const Result first = RunCli("train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                              " --set train.steps=2 --set checkpoint.every=2");
  ASSERT_EQ(first.code, 0) << first.output;
  const fs::path ckpt = dir / "run" / "checkpoints" / "step-2";
  {
    std::fstream f(ckpt / "params.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const std::string cmd = std::string(RINGSTEP_MPIEXEC) + " --oversubscribe -np 3 " +
                          RINGSTEP_BINARY + " train " + Tiny() + " --set run.out_dir=" +
                          (dir / "run2").string() + " --set train.steps=4 --set checkpoint.resume=" +
                          ckpt.string() + " 2>&1";
  const Result r = RunShell(cmd);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(Count(r.output, "ringstep: error"), 1u) << r.output;
  EXPECT_NE(r.output.find("params.bin"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "run2")) << r.output;
  fs::remove_all(dir);
}

size_t LineCount(const fs::path& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The config a run saves, re-run as it is, never touches that run (issue: run.overwrite used
// to be saved, and a re-run deleted 600 steps). run.overwrite, given on the command line,
// clears everything the earlier run and its tools wrote, and nothing else.
TEST(Cli, ARerunOfASavedConfigNeverDeletesTheRun) {
  fs::path dir = Temp("rerun");
  const fs::path run = dir / "run";
  const std::string quick =
      " --set train.eval_batches=1 --set run.threads=1 --set profile.peak_gflops=100";
  Result first = RunCli("train " + Tiny() + " --set run.out_dir=" + run.string() + quick +
                        " --set train.steps=3 --set run.overwrite=true"
                        " --set profile.trace_steps=[2,2]");
  ASSERT_EQ(first.code, 0) << first.output;
  ASSERT_EQ(LineCount(run / "steps.jsonl"), 3u);
  ASSERT_TRUE(fs::exists(run / "trace"));
  const std::string saved = (run / "config.yaml").string();
  std::ifstream in(saved);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("overwrite"), std::string::npos) << text;

  Result again = RunCli("train " + saved + " --set train.steps=1");
  EXPECT_EQ(again.code, 2) << again.output;
  EXPECT_NE(again.output.find("already holds an earlier run"), std::string::npos) << again.output;
  EXPECT_EQ(LineCount(run / "steps.jsonl"), 3u);

  std::ofstream(run / "steps.png") << "a plot of the earlier run";
  std::ofstream(run / "book.bin") << "a user's file";
  Result over = RunCli("train " + saved +
                       " --set train.steps=1 --set run.overwrite=true --set profile.trace_steps=[]");
  EXPECT_EQ(over.code, 0) << over.output;
  EXPECT_EQ(LineCount(run / "steps.jsonl"), 1u);
  EXPECT_FALSE(fs::exists(run / "trace"));
  EXPECT_FALSE(fs::exists(run / "steps.png"));
  EXPECT_TRUE(fs::exists(run / "book.bin"));
  fs::remove_all(dir);
}

// A disk that fills mid-run: exit 3 naming the file and the cause, the done line of the
// steps that ran printed, steps.jsonl left with whole records only. Needs root (a tmpfs).
TEST(Cli, AFullDiskEndsTheRunWithExitThreeAndWholeRecords) {
  fs::path dir = Temp("fulldisk");
  if (std::system(("mount -t tmpfs -o size=48k tmpfs " + dir.string() + " 2>/dev/null").c_str()))
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  Result r = RunCli("train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                    " --set train.steps=200 --set train.eval_batches=1 --set run.threads=1"
                    " --set profile.peak_gflops=100 --set profile.trace_steps=[]");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("fault of the machine: cannot write '" + (dir / "run").string() +
                          "/steps.jsonl': No space left on device"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("done: "), std::string::npos) << r.output;
  size_t records = 0;
  {
    std::ifstream steps(dir / "run" / "steps.jsonl");
    for (std::string line; std::getline(steps, line); ++records)
      EXPECT_EQ(line.back(), '}') << "record " << records + 1 << " is cut";
  }
  EXPECT_GT(records, 0u);
  EXPECT_LT(records, 200u);
  EXPECT_FALSE(fs::exists(dir / "run" / "summary.json.tmp"));
  [[maybe_unused]] int rc = std::system(("umount " + dir.string()).c_str());
  fs::remove_all(dir);
}

// The tensors of a safetensors file: everything after its JSON header.
std::string TensorBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(file.at(size_t(i)));
  return file.substr(8 + n);
}

// A finished run leaves its weights (final.safetensors) and `export RUN_DIR` works on it with
// or without checkpoints; they are the weights of the run's last checkpoint.
TEST(Cli, AFinishedRunLeavesItsWeightsAndExportsThem) {
  fs::path dir = Temp("final");
  const fs::path run = dir / "run";
  Result r = RunCli("train " + Tiny() + " --set run.out_dir=" + run.string() +
                    " --set train.steps=3 --set train.eval_batches=1 --set run.threads=1"
                    " --set profile.peak_gflops=100 --set checkpoint.every=3");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(run / "final.safetensors"));
  Result e = RunCli("export " + run.string() + " --output " + (dir / "m.safetensors").string());
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("final.safetensors (step 3)"), std::string::npos) << e.output;
  Result c = RunCli("export " + (run / "checkpoints" / "step-3").string() + " --output " +
                    (dir / "c.safetensors").string());
  EXPECT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(TensorBytes(dir / "m.safetensors"), TensorBytes(dir / "c.safetensors"));
  fs::remove_all(run / "checkpoints");  // a run without checkpoints exports as well
  e = RunCli("export " + run.string() + " --output " + (dir / "m2.safetensors").string());
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_EQ(TensorBytes(dir / "m2.safetensors"), TensorBytes(dir / "c.safetensors"));
  fs::remove_all(dir);
}

// A directory, a FIFO or an endless device where a file is expected: refused before a byte
// is read, so nothing hangs or fills memory.
TEST(Cli, OnlyRegularFilesAreRead) {
  fs::path dir = Temp("irregular");
  const std::string run = " --set run.out_dir=" + (dir / "run").string();
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  ExpectBadInput("train " + dir.string() + run, "is a directory, expected a regular file", dir);
  ExpectBadInput("train /dev/zero" + run, "'/dev/zero' is a character device", dir);
  ExpectBadInput("train " + (dir / "fifo").string() + run, "is a FIFO", dir);
  ExpectBadInput("train " + Tiny() + run +
                     " --set data.source=file --set data.path=" + (dir / "fifo").string(),
                 "token file '" + (dir / "fifo").string() + "' is a FIFO", dir);
  ExpectBadInput("prepare --input /dev/zero --output " + (dir / "x.bin").string(),
                 "prepare input '/dev/zero' is a character device", dir);
  EXPECT_FALSE(fs::exists(dir / "x.bin"));
  {
    std::ofstream big(dir / "big.yaml");
    big << std::string((16 << 20) + 1, '#');
  }
  ExpectBadInput("train " + (dir / "big.yaml").string() + run, "more than the limit of 16 MiB",
                 dir);
  fs::create_directories(dir / "report" / "steps.jsonl");
  ExpectBadInput("report " + (dir / "report").string(), "steps.jsonl' is a directory", dir);
  fs::remove_all(dir);
}

// What the fuzzer found (issue 14): each is exit 2 with a message, before anything is built.
TEST(Cli, FuzzedInputsExitWithCodeTwo) {
  fs::path dir = Temp("fuzzed");
  const std::string run = " --set run.out_dir=" + (dir / "run").string();
  std::ofstream(dir / "file") << "x";
  ExpectBadInput("train " + Tiny() + " --set run.out_dir=" + (dir / "file" / "run").string(),
                 "' cannot be created: '" + (dir / "file").string() + "' is not a directory", dir);
  ExpectBadInput("train " + Tiny() + " --set run.out_dir=" + (dir / std::string(300, 'n')).string(),
                 "more than the 255 bytes a name may have", dir);
  std::ofstream(dir / "two.yaml") << "train:\n  steps: 5\n---\ntrain:\n  steps: 7\n";
  ExpectBadInput("train " + (dir / "two.yaml").string() + run,
                 "two.yaml:4:1: a second YAML document", dir);
  ExpectBadInput("train " + Tiny() + run + " --set 'train.steps=!!str 5'",
                 "got '5' with the tag !!str", dir);
  ExpectBadInput("train " + Tiny() + run + " --set train.lr=" + std::string(500, '7') + "x",
                 "... (501 bytes)", dir);
  ExpectBadInput("prepare --input " + Tiny() + " --output ''", "--output is empty", dir);
  fs::create_symlink(dir / "loop_b", dir / "loop_a");
  fs::create_symlink(dir / "loop_a", dir / "loop_b");
  ExpectBadInput("report " + (dir / "loop_a").string(), "Too many levels of symbolic links", dir);
  ExpectBadInput("train " + Tiny() + run + " --set model.n_layers=2147483000",
                 "'model.n_layers' must be in [1, 65536]", dir);
  ExpectBadInput("train " + Tiny() + run + " --set model.n_layers=65536 --set model.d_model=65536",
                 " GiB, this machine has ", dir);
  ExpectBadInput("train " + Tiny() + run + " --set run.threads=50000",
                 "'run.threads' is 50000, more than 4 x the", dir);
  fs::remove_all(dir);
}

// fp16 without loss scaling is allowed but risky: the run goes ahead with a warning that
// says what can go wrong and what to use instead.
TEST(Cli, Fp16WithoutLossScalingWarnsAndRuns) {
  fs::path dir = Temp("fp16none");
  Result r = RunCli("train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                    " --set precision.dtype=fp16 --set precision.loss_scale.mode=none"
                    " --set train.steps=2 --set train.eval_batches=1 --set run.threads=1"
                    " --set profile.peak_gflops=100 --set profile.trace_steps=[]");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("warning"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("round to zero in fp16"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "run" / "summary.json"));
  fs::remove_all(dir);
}

// The log header's "pool of N threads (rank 0 on CPUs L)" for a 1-step run of tiny.yaml with
// run.threads auto, in this process's environment.
std::string PoolLine(const std::string& name) {
  fs::path dir = Temp(name);
  Result r = RunCli("train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                    " --set train.steps=1 --set train.eval_batches=1 --set run.threads=auto"
                    " --set profile.peak_gflops=100 --set profile.trace_steps=[]");
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find("pool of");
  return at == std::string::npos ? r.output : r.output.substr(at, r.output.find(')', at) - at);
}

// OMP_PROC_BIND makes libgomp pin the initial thread to one CPU before main: the process
// must still count, and keep, all of its CPUs (threads auto, and after ringstep re-executes
// itself to set its OpenMP environment).
TEST(Cli, OpenMpBindingKeepsEveryCpu) {
  if (ringstep::hardware_threads() < 2) GTEST_SKIP() << "one CPU: nothing to lose";
  const std::string unbound = PoolLine("unbound");
  EXPECT_NE(unbound.find("pool of " + std::to_string(ringstep::hardware_threads()) + " threads"),
            std::string::npos)
      << unbound;
  setenv("OMP_PROC_BIND", "close", 1);
  setenv("OMP_PLACES", "cores", 1);
  const std::string bound = PoolLine("bound");
  unsetenv("OMP_PROC_BIND");
  unsetenv("OMP_PLACES");
  EXPECT_EQ(bound, unbound);
}

// Writes N tokens below 256 (tiny.yaml's vocabulary) as an llm.c shard at PATH.
void WriteTinyShard(const fs::path& path, size_t n, unsigned seed) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = uint16_t((i * 31 + seed * 7 + i / 5) % 256);
  ringstep::write_llmc_shard(path.string(), tokens);
}

// llm.c's shards train tiny.yaml from the command line: a quoted glob of train shards and a
// val shard, as configs/gpt2-124m.yaml and docs/data.md tell a user to pass them.
TEST(Cli, TrainsOnLlmcShards) {
  fs::path dir = Temp("llmc");
  for (unsigned s = 0; s < 3; ++s)
    WriteTinyShard(dir / ("tiny_train_00000" + std::to_string(s) + ".bin"), 1500, s);
  WriteTinyShard(dir / "tiny_val_000000.bin", 600, 9);
  const std::string data =
      " --set data.source=file --set 'data.path=" + (dir / "tiny_train_*.bin").string() +
      "' --set data.val_path=" + (dir / "tiny_val_000000.bin").string();
  const std::string quick =
      " --set train.steps=2 --set train.eval_batches=1 --set run.threads=1"
      " --set profile.peak_gflops=100 --set profile.trace_steps=[]";
  for (const std::string format : {"auto", "llmc"}) {
    const fs::path run = dir / ("run-" + format);
    Result r = RunCli("train " + Tiny() + " --set run.out_dir=" + run.string() + data + quick +
                      " --set data.format=" + format);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("3 files matching '" + (dir / "tiny_train_*.bin").string() +
                            "' (llm.c shards): 4500 tokens"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(LineCount(run / "steps.jsonl"), 2u);
    EXPECT_TRUE(fs::exists(run / "summary.json"));
  }
  fs::remove_all(dir);
}

// Every bad shard exits 2 naming the file and what is wrong, and writes no run directory.
TEST(Cli, BadLlmcShardsExitWithCodeTwoAndWriteNothing) {
  fs::path dir = Temp("badllmc");
  const std::string run = " --set run.out_dir=" + (dir / "run").string();
  const std::string file = run + " --set data.source=file --set data.path=";
  WriteTinyShard(dir / "good.bin", 1000, 0);
  ExpectBadInput("train " + Tiny() + run + " --set data.source=file --set 'data.path=" +
                     (dir / "*_train_*.bin").string() + "'",
                 "data.path '" + (dir / "*_train_*.bin").string() + "': no file matches", dir);
  ExpectBadInput(
      "train " + Tiny() + file + (dir / "good.bin").string() + " --set data.format=ringstep",
      "good.bin: not a ringstep token file", dir);
  ExpectBadInput(
      "train " + Tiny() + file + (dir / "good.bin").string() + " --set model.vocab_size=128",
      "good.bin: token 5 (byte offset 1034) is 156, not below model.vocab_size 128", dir);
  ExpectBadInput("train " + Tiny() + file + (dir / "good.bin").string() +
                     " --set data.val_path=" + (dir / "good.bin").string(),
                 "the run would train on its val data", dir);
  ExpectBadInput("train " + Tiny() + file + dir.string(), "is a directory; name a token file", dir);
  fs::copy_file(dir / "good.bin", dir / "cut.bin");
  fs::resize_file(dir / "cut.bin", fs::file_size(dir / "cut.bin") - 1);
  ExpectBadInput("train " + Tiny() + file + (dir / "cut.bin").string(),
                 "cut.bin: truncated: header says 1000 tokens (3024 bytes) but file has 3023", dir);
  fs::resize_file(dir / "cut.bin", 1000);
  ExpectBadInput("train " + Tiny() + file + (dir / "cut.bin").string(),
                 "cut.bin: truncated: file has 1000 bytes, less than the 1024-byte header", dir);
  WriteTinyShard(dir / "empty.bin", 0, 0);
  ExpectBadInput("train " + Tiny() + file + (dir / "empty.bin").string(),
                 "empty.bin: holds no tokens", dir);
  {
    std::ofstream v2(dir / "v2.bin", std::ios::binary);
    // 20240520, version 2, 1 token
    const std::array<unsigned char, 12> header = {0x88, 0xd8, 0x34, 0x01, 2, 0, 0, 0, 1, 0, 0, 0};
    v2.write(reinterpret_cast<const char*>(header.data()), header.size());
    v2 << std::string(1024 - 12 + 2, '\0');
  }
  ExpectBadInput("train " + Tiny() + file + (dir / "v2.bin").string(),
                 "v2.bin: unsupported llm.c shard version 2 (expected 1)", dir);
  fs::remove_all(dir);
}

TEST(Cli, HelpExitsZero) {
  Result r = RunCli("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub : {"train", "prepare", "report", "export", "bench", "--version"})
    EXPECT_NE(r.output.find(sub), std::string::npos) << sub << "\n" << r.output;
}

// `train --help` says where every key and every printed number is explained, and how --set
// is written.
TEST(Cli, TrainHelpPointsAtTheDocs) {
  Result r = RunCli("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"docs/configs.md", "docs/logs.md", "KEY=VALUE", "--set train.lr=1e-3",
                        "--dry-run", "--ranks"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
}

// The version and the commit the binary was built from, or "unknown" outside a git checkout.
TEST(Cli, VersionNamesTheBuild) {
  Result r = RunCli("--version");
  EXPECT_EQ(r.code, 0) << r.output;
  const std::regex line(
      "ringstep [0-9]+\\.[0-9]+\\.[0-9]+ \\(git ([0-9a-f]{7,40}(-dirty)?|unknown), \\w+ build, "
      "CUDA backend (on|off), .*, sgemm kernel [\\w-]+\\)\n");
  EXPECT_TRUE(std::regex_match(r.output, line)) << r.output;
}

// The output of a dry run is the effective config (a YAML document that loads back to the
// config `train` would run) with the estimates as comments; it writes nothing.
TEST(Cli, DryRunPrintsTheEffectiveConfigAndEstimatesAndWritesNothing) {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS"})
    unsetenv(var);
  fs::path dir = Temp("dryrun");
  const std::vector<std::string> overrides = {"run.out_dir=" + (dir / "run").string(),
                                              "train.steps=7", "precision.dtype=bf16",
                                              "recompute.policy=full"};
  std::string args = "train " + Tiny() + " --dry-run";
  for (const std::string& o : overrides) args += " --set " + o;
  Result r = RunCli(args, "/dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));

  const ringstep::Config loaded = ringstep::load_config(Tiny(), overrides);
  ringstep::Config printed = ringstep::parse_config(r.output, "dry-run output");
  printed.source_path = loaded.source_path;
  EXPECT_EQ(printed, loaded) << r.output;
  const std::string memory =
      ringstep::human_bytes(ringstep::memory_estimate_bytes(loaded)) + " per rank";
  EXPECT_NE(r.output.find(memory), std::string::npos) << memory << "\n" << r.output;
  for (const char* s : {"# on 1 rank (", " MFLOP/token model", "recompute  full: +", "tokens/step",
                        "(the dry run writes nothing there)"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;

  // The world size: --ranks, else the launcher's; under a launcher only rank 0 prints.
  Result four = RunCli(args + " --ranks 4");
  EXPECT_EQ(four.code, 0) << four.output;
  EXPECT_NE(four.output.find("8 micro x 2 accum x 4 ranks = 64 sequences"), std::string::npos)
      << four.output;
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  Result rank1 = RunCli(args);
  EXPECT_EQ(rank1.code, 0) << rank1.output;
  EXPECT_EQ(rank1.output, "");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  Result rank0 = RunCli(args);
  EXPECT_NE(rank0.output.find("x 2 ranks = 32 sequences"), std::string::npos) << rank0.output;
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

// 0/1 Adam's knobs: a bad value is exit 2 naming the key, before anything is written.
TEST(Cli, ZeroOneAdamBadKnobsExitTwo) {
  fs::path dir = Temp("zeroone");
  const std::string train = "train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                            " --set optimizer.name=zero_one_adam";
  ExpectBadInput(train + " --set optimizer.zero_one.var_freeze_step=0",
                 "'optimizer.zero_one.var_freeze_step' must be >= 1", dir);
  ExpectBadInput(train + " --set optimizer.zero_one.local_step_clipper=-3",
                 "'optimizer.zero_one.local_step_clipper' must be >= 1", dir);
  ExpectBadInput(train + " --set optimizer.zero_one.var_update_scaler=two",
                 "optimizer.zero_one.var_update_scaler", dir);
  ExpectBadInput(train + " --set optimizer.zero_one.local_step_scalar=4",
                 "optimizer.zero_one.local_step_scaler", dir);
  ExpectBadInput("train " + Tiny() + " --set run.out_dir=" + (dir / "run").string() +
                     " --set optimizer.name=zero_one_adm",
                 "zero_one_adam", dir);
  fs::remove_all(dir);
}

// A dry run refuses what `train` refuses, with the same message, and --ranks belongs to it.
TEST(Cli, DryRunRefusesBadConfigsLikeTrain) {
  fs::path dir = Temp("dryrunbad");
  const std::string train = "train " + Tiny() + " --set run.out_dir=" + (dir / "run").string();
  const std::vector<std::string> bad_sets = {
      " --set train.lrr=1",
      " --set model.n_heads=3",
      " --set run.threads=50000",
      " --set model.n_layers=2147483000",
      " --set train.global_batch=7",
      " --set run.out_dir=" + (dir / std::string(300, 'n')).string()};
  for (const std::string& bad : bad_sets) {
    const Result real = RunCli(train + bad);
    const Result dry = RunCli(train + bad + " --dry-run");
    EXPECT_EQ(real.code, 2) << bad << "\n" << real.output;
    EXPECT_EQ(dry.code, 2) << bad << "\n" << dry.output;
    EXPECT_EQ(dry.output, real.output) << bad;
  }
  ExpectBadInput(train + " --dry-run --set train.global_batch=16 --ranks 2", "global_batch", dir);
  ExpectBadInput(train + " --dry-run --ranks 0", "--ranks", dir);
  ExpectBadInput(train + " --ranks 2", "--ranks requires --dry-run", dir);
  fs::remove_all(dir);
}

// Its --help prints its header comment, without the comment marks, and nothing after it.
TEST(Cli, MpirunWrapperHelpIsItsHeaderOnly) {
  const std::string cmd = std::string(RINGSTEP_SOURCE_DIR) + "/launch/ringstep-mpirun --help 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("ringstep-mpirun -n 2 configs/tiny.yaml"), std::string::npos) << out;
  EXPECT_NE(out.find("RINGSTEP_BIN"), std::string::npos) << out;
  EXPECT_EQ(out.find("set -e"), std::string::npos) << out;
  EXPECT_EQ(out.find("#"), std::string::npos) << out;
}

}  // namespace
