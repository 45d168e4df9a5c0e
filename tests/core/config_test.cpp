#include "core/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ringstep {
namespace {

// The InputError message parse_config throws, or "" when it accepts the text.
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "x.yaml", overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

Config parse(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return parse_config(yaml, "x.yaml", overrides);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Config, ASecondYamlDocumentIsRefusedNotIgnored) {
  EXPECT_EQ(error_of("train:\n  steps: 5\n---\ntrain:\n  steps: 7\n"),
            "x.yaml:4:1: a second YAML document (after '---'); a config is one document");
  EXPECT_NE(error_of("train:\n  steps: 5\n---\n").find("a second YAML document"),
            std::string::npos);
  EXPECT_EQ(error_of("---\ntrain:\n  steps: 5\n"), "");  // one document, explicitly started
  EXPECT_EQ(error_of("", {"train.steps=5\n---\n7"}),
            "--set train.steps: a second YAML document (after '---'); a config is one document");
}

TEST(Config, TaggedScalarIsNotANumberOrABool) {
  EXPECT_EQ(error_of("train:\n  steps: !!str 5\n"),
            "x.yaml:2:10: 'train.steps' must be an integer, got '5' with the tag !!str");
  EXPECT_NE(error_of("comm:\n  overlap: !!str true\n").find("'true' with the tag !!str"),
            std::string::npos);
  EXPECT_NE(error_of("train:\n  lr: !custom 0.1\n").find("with the tag !custom"),
            std::string::npos);
  EXPECT_EQ(parse("train:\n  steps: 5\n").train.steps, 5);
}

TEST(Config, HugeOrBinaryValuesAreEscapedAndCutInMessages) {
  const std::string huge(100000, 'a');
  EXPECT_EQ(error_of("", {"train.lr=" + huge}),
            "--set train.lr: 'train.lr' must be a number, got '" + std::string(80, 'a') +
                "... (100000 bytes)'");
  EXPECT_EQ(error_of("", {"run.device=\x01\xff"}).substr(0, 60),
            "--set run.device: 'run.device' must be one of cpu, cuda, got");
  EXPECT_NE(error_of("", {"run.device=\x01\xff"}).find("got '\\x01\\xFF'"), std::string::npos)
      << error_of("", {"run.device=\x01\xff"});
  const std::string key_message = error_of("", {huge + "=1"});
  EXPECT_EQ(key_message.find("aaaa" + std::string(80, 'a')), std::string::npos);
  EXPECT_NE(key_message.find("... (100002 bytes): unknown key"), std::string::npos)
      << key_message.substr(0, 300);
}

TEST(Config, DefaultsWhenKeysAbsent) {
  Config cfg = parse("run:\n  name: other\ntrain:\n  steps: 10\n");
  Config expected;
  expected.source_path = "x.yaml";
  expected.run.name = "other";
  expected.train.steps = 10;
  EXPECT_EQ(cfg, expected);
  EXPECT_EQ(cfg.optimizer.betas, (std::array<double, 2>{0.9, 0.95}));
  EXPECT_EQ(cfg.profile.trace_steps, (std::vector<int>{5, 7}));
  EXPECT_EQ(cfg.precision.loss_scale.initial, 65536.0);
}

TEST(Config, EmptyFileAndEmptySectionsAreDefaults) {
  Config expected;
  expected.source_path = "x.yaml";
  EXPECT_EQ(parse(""), expected);
  EXPECT_EQ(parse("# only a comment\n"), expected);
  EXPECT_EQ(parse("train:\nmodel:\n"), expected);
}

TEST(Config, UnknownKeySuggestsNearestInSection) {
  EXPECT_EQ(error_of("train:\n  steps: 5\n  lrr: 0.1\n"),
            "x.yaml:3:3: unknown key 'train.lrr'; did you mean 'train.lr'?");
  EXPECT_EQ(error_of("train: {warmup: 3}\n"),
            "x.yaml:1:9: unknown key 'train.warmup'; did you mean 'train.warmup_steps'?");
  EXPECT_EQ(error_of("precision:\n  loss_scale:\n    growth_factr: 2\n"),
            "x.yaml:3:5: unknown key 'precision.loss_scale.growth_factr'; "
            "did you mean 'precision.loss_scale.growth_factor'?");
}

TEST(Config, UnknownKeySuggestsKeyOfAnotherSection) {
  EXPECT_EQ(error_of("train:\n  betas: [0.9, 0.99]\n"),
            "x.yaml:2:3: unknown key 'train.betas'; did you mean 'optimizer.betas'?");
  EXPECT_EQ(error_of("trian:\n  lr: 1\n"),
            "x.yaml:1:1: unknown key 'trian'; did you mean 'train'?");
}

TEST(Config, UnknownKeyWithoutNearNameListsSection) {
  EXPECT_EQ(error_of("recompute: {zzzzzz: 1}\n"),
            "x.yaml:1:13: unknown key 'recompute.zzzzzz'; valid keys in 'recompute': policy, k");
  EXPECT_EQ(error_of("foo: 1\n").rfind("x.yaml:1:1: unknown key 'foo'; valid sections: run, ", 0),
            0u);
}

TEST(Config, WrongTypeNamesKeyAndValue) {
  EXPECT_EQ(error_of("train:\n  steps: abc\n"),
            "x.yaml:2:10: 'train.steps' must be an integer, got 'abc'");
  EXPECT_EQ(error_of("train:\n  steps: 1.5\n"),
            "x.yaml:2:10: 'train.steps' must be an integer, got '1.5'");
  EXPECT_EQ(error_of("train: {lr: fast}\n"),
            "x.yaml:1:13: 'train.lr' must be a number, got 'fast'");
  EXPECT_EQ(error_of("comm: {overlap: maybe}\n"),
            "x.yaml:1:17: 'comm.overlap' must be true or false, got 'maybe'");
  EXPECT_EQ(error_of("run: {seed: -1}\n"),
            "x.yaml:1:13: 'run.seed' must be a non-negative integer, got '-1'");
  EXPECT_EQ(error_of("train: {steps: [1, 2]}\n"),
            "x.yaml:1:16: 'train.steps' must be an integer, got a list");
  EXPECT_EQ(error_of("run: {name: ''}\n"),
            "x.yaml:1:13: 'run.name' must be a non-empty string, got ''");
}

TEST(Config, NullValueIsLocatedAtItsKey) {
  EXPECT_EQ(error_of("train:\n  steps:\nmodel: {}\n"),
            "x.yaml:2:3: 'train.steps' must be an integer, got null");
}

TEST(Config, OutOfRangeNamesBound) {
  EXPECT_EQ(error_of("model:\n  n_layers: 0\n"),
            "x.yaml:2:13: 'model.n_layers' must be in [1, 65536], got 0");
  EXPECT_EQ(error_of("model: {vocab_size: 70000}\n"),
            "x.yaml:1:21: 'model.vocab_size' must be in [2, 65536], got 70000");
  EXPECT_EQ(error_of("train: {steps: 99999999999}\n"),
            "x.yaml:1:16: 'train.steps' must be a 32-bit integer, got 99999999999");
  EXPECT_EQ(error_of("train: {lr: .inf}\n"),
            "x.yaml:1:13: 'train.lr' must be a number, got '.inf'");
}

// One violation per range rule in the schema: (yaml, the expected "must be ..." tail).
TEST(Config, EveryRangeRuleRejects) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model: {seq_len: 0}", "'model.seq_len' must be >= 1, got 0"},
      {"model: {vocab_size: 1}", "'model.vocab_size' must be in [2, 65536], got 1"},
      {"train: {lr: 0}", "'train.lr' must be > 0, got 0"},
      {"train: {grad_clip: -1}", "'train.grad_clip' must be >= 0, got -1"},
      {"train: {warmup_steps: -1}", "'train.warmup_steps' must be >= 0, got -1"},
      {"train: {min_lr_ratio: 1.5}", "'train.min_lr_ratio' must be in [0, 1], got 1.5"},
      {"precision: {loss_scale: {initial: 0}}",
       "'precision.loss_scale.initial' must be in (0, 16777216], got 0"},
      {"precision: {loss_scale: {initial: 4294967296}}",
       "'precision.loss_scale.initial' must be in (0, 16777216], got 4294967296"},
      {"precision: {loss_scale: {growth_factor: 1}}",
       "'precision.loss_scale.growth_factor' must be > 1, got 1"},
      {"precision: {loss_scale: {backoff_factor: 1}}",
       "'precision.loss_scale.backoff_factor' must be in (0, 1), got 1"},
      {"precision: {loss_scale: {backoff_factor: 0}}",
       "'precision.loss_scale.backoff_factor' must be in (0, 1), got 0"},
      {"precision: {loss_scale: {growth_interval: 0}}",
       "'precision.loss_scale.growth_interval' must be >= 1, got 0"},
      {"precision: {loss_scale: {hysteresis: 0}}",
       "'precision.loss_scale.hysteresis' must be >= 1, got 0"},
      {"precision: {loss_scale: {min_scale: 0}}",
       "'precision.loss_scale.min_scale' must be in (0, 16777216], got 0"},
      {"precision: {loss_scale: {min_scale: 3.3e7}}",
       "'precision.loss_scale.min_scale' must be in (0, 16777216], got 3.3e7"},
      {"precision: {loss_scale: {max_consecutive_skips: 0}}",
       "'precision.loss_scale.max_consecutive_skips' must be >= 1, got 0"},
      {"recompute: {k: 0}", "'recompute.k' must be >= 1, got 0"},
      {"optimizer: {betas: [0.9, 1.0]}",
       "'optimizer.betas' must be a list of 2 numbers each in [0, 1), got 1.0"},
      {"optimizer: {betas: [-0.1, 0.9]}",
       "'optimizer.betas' must be a list of 2 numbers each in [0, 1), got -0.1"},
      {"optimizer: {eps: 0}", "'optimizer.eps' must be > 0, got 0"},
      {"comm: {bucket_mb: 0}", "'comm.bucket_mb' must be > 0, got 0"},
      {"comm: {link: {bandwidth_gbps: -1}}", "'comm.link.bandwidth_gbps' must be >= 0, got -1"},
      {"comm: {link: {latency_us: -1}}", "'comm.link.latency_us' must be >= 0, got -1"},
      {"profile: {log_every: 0}", "'profile.log_every' must be >= 1, got 0"},
      {"checkpoint: {keep: 0}", "'checkpoint.keep' must be >= 1, got 0"},
      {"run: {threads: 0}", "'run.threads' must be auto or >= 1, got 0"},
      {"profile: {peak_gflops: 0}", "'profile.peak_gflops' must be auto or > 0, got 0"},
  };
  for (const auto& [yaml, tail] : cases) {
    std::string err = error_of(yaml + "\n");
    EXPECT_TRUE(err.starts_with("x.yaml:1:") && err.ends_with(": " + tail))
        << yaml << "\n  got: " << err;
  }
}

TEST(Config, EnumListsChoicesAndSuggests) {
  EXPECT_EQ(error_of("train: {schedule: cosin}\n"),
            "x.yaml:1:19: 'train.schedule' must be one of cosine, linear, constant, got 'cosin'; "
            "did you mean 'cosine'?");
  EXPECT_EQ(error_of("precision: {dtype: int8}\n"),
            "x.yaml:1:20: 'precision.dtype' must be one of fp32, bf16, fp16, got 'int8'");
}

TEST(Config, ListAndAutoValues) {
  Config cfg = parse(
      "run: {threads: 3}\noptimizer: {betas: [0.8, 0.999]}\n"
      "profile: {trace_steps: [], peak_gflops: 120.5}\n");
  EXPECT_EQ(cfg.run.threads, 3);
  EXPECT_EQ(cfg.optimizer.betas, (std::array<double, 2>{0.8, 0.999}));
  EXPECT_TRUE(cfg.profile.trace_steps.empty());
  EXPECT_EQ(cfg.profile.peak_gflops, 120.5);
  cfg = parse("run: {threads: auto}\nprofile: {trace_steps: [3, 3], peak_gflops: auto}\n");
  EXPECT_EQ(cfg.run.threads, 0);
  EXPECT_EQ(cfg.profile.trace_steps, (std::vector<int>{3, 3}));
  EXPECT_EQ(cfg.profile.peak_gflops, 0.0);
  EXPECT_EQ(error_of("profile: {trace_steps: [7, 5]}\n"),
            "x.yaml:1:24: 'profile.trace_steps' must be [] or [first, last] with 0 < first <= "
            "last, got [7, 5]");
  EXPECT_EQ(error_of("profile: {trace_steps: [0, 5]}\n"),
            "x.yaml:1:24: 'profile.trace_steps' must be [] or [first, last] with 0 < first <= "
            "last, got [0, 5]");
  EXPECT_EQ(error_of("optimizer: {betas: [0.9]}\n"),
            "x.yaml:1:20: 'optimizer.betas' must be a list of 2 numbers, got [0.9]");
  EXPECT_EQ(error_of("run: {threads: many}\n"),
            "x.yaml:1:16: 'run.threads' must be auto or an integer, got 'many'");
  EXPECT_EQ(parse("data: {path: null}\n").data.path, "");
  EXPECT_EQ(parse("data: {source: file, path: tokens.bin}\n").data.path, "tokens.bin");
}

TEST(Config, StructureErrorsHavePositions) {
  EXPECT_EQ(error_of("train: 5\n"), "x.yaml:1:8: 'train' must be a map of keys, got '5'");
  EXPECT_EQ(error_of("precision:\n  loss_scale: [1]\n"),
            "x.yaml:2:15: 'precision.loss_scale' must be a map of keys, got a list");
  EXPECT_EQ(error_of("- run\n- model\n"),
            "x.yaml:1:1: the top level must be a map of sections, got a list");
  EXPECT_EQ(error_of("just text\n"),
            "x.yaml:1:1: the top level must be a map of sections, got 'just text'");
  EXPECT_EQ(error_of("train:\n  steps: 1\n  steps: 2\n"),
            "x.yaml:3:3: 'train.steps' is set twice (first at x.yaml:2:3)");
  EXPECT_TRUE(error_of("train.lr: 1\n").starts_with("x.yaml:1:1: 'train.lr' is not a key here"));
}

TEST(Config, YamlSyntaxErrorHasPosition) {
  EXPECT_EQ(error_of("train: {steps: 5\nmodel: {}\n"),
            "x.yaml:2:6: YAML syntax error: end of map flow not found");
  EXPECT_TRUE(error_of("train:\n  steps: [1, 2\n").starts_with("x.yaml:"));
  EXPECT_TRUE(error_of("a: b: c\n").starts_with("x.yaml:1:5: YAML syntax error: "));
}

TEST(Config, CrossFieldChecksNameBothKeys) {
  EXPECT_EQ(error_of("model:\n  d_model: 130\n"),
            "x.yaml:2:12: 'model.d_model' (130) must be divisible by 'model.n_heads' (4)");
  EXPECT_EQ(error_of("model:\n  d_model: 128\n  n_heads: 5\n"),
            "x.yaml:3:12: 'model.d_model' (128) must be divisible by 'model.n_heads' (5)");
  EXPECT_EQ(error_of("data:\n  source: file\n"),
            "x.yaml:2:11: 'data.source' is file but 'data.path' is not set");
  EXPECT_EQ(error_of("data: {format: llmc}\n"),
            "x.yaml:1:16: 'data.format' is set but 'data.source' is synthetic, which reads no "
            "file; set data.source=file to train on it");
  EXPECT_EQ(error_of("data: {format: auto}\n"), "");
  EXPECT_EQ(error_of("precision: {loss_scale: {initial: 4, min_scale: 8}}\n"),
            "x.yaml:1:49: 'precision.loss_scale.min_scale' (8.0) must be <= "
            "'precision.loss_scale.initial' (4.0)");
  // warmup may exceed steps (the schedule never leaves warmup), so short smoke runs work.
  EXPECT_EQ(error_of("train: {steps: 5, warmup_steps: 30}\n"), "");
  EXPECT_EQ(parse("model: {d_model: 96, n_heads: 3}\n").model.d_model, 96);  // odd head dim ok
}

TEST(Config, LossScaleModeAutoAndItsChecks) {
  EXPECT_EQ(Config{}.precision.loss_scale.mode, LossScaleMode::auto_);
  EXPECT_EQ(parse("precision: {loss_scale: {mode: auto}}\n").precision.loss_scale.mode,
            LossScaleMode::auto_);
  EXPECT_EQ(error_of("precision: {loss_scale: {mode: dynamc}}\n"),
            "x.yaml:1:32: 'precision.loss_scale.mode' must be one of auto, dynamic, static, "
            "none, got 'dynamc'; did you mean 'dynamic'?");
  // Allowed: the trainer prints loss_scale_warning (optim/loss_scaler.h) for it.
  EXPECT_EQ(error_of("precision: {dtype: fp16, loss_scale: {mode: none}}\n"), "");
  // min_scale <= initial, located at whichever of the two the user set.
  EXPECT_EQ(error_of("precision: {loss_scale: {initial: 0.5}}\n"),
            "x.yaml:1:35: 'precision.loss_scale.min_scale' (1.0) must be <= "
            "'precision.loss_scale.initial' (0.5)");
  EXPECT_EQ(error_of("", {"precision.loss_scale.min_scale=131072"}),
            "--set precision.loss_scale.min_scale: 'precision.loss_scale.min_scale' (131072.0) "
            "must be <= 'precision.loss_scale.initial' (65536.0)");
  EXPECT_EQ(error_of("precision: {loss_scale: {initial: 16777216, min_scale: 16777216}}\n"), "");
}

TEST(Config, MissingFileNamesFileAndReason) {
  try {
    load_config("/nonexistent/ringstep.yaml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot read config '/nonexistent/ringstep.yaml': No such file or directory");
  }
  EXPECT_THROW(load_config(RINGSTEP_SOURCE_DIR "/configs"), InputError);  // a directory
}

TEST(Config, OverridesApplyAfterTheFile) {
  Config cfg = parse("train: {lr: 0.1, steps: 10}\n",
                     {"train.lr=2.5e-4", "profile.trace_steps=[5,9]", "run.threads=auto",
                      "optimizer.betas=[0.5, 0.6]", "comm.overlap=false", "data.source=file",
                      "data.path=t.bin", "data.val_path=v.bin"});
  EXPECT_EQ(cfg.train.lr, 2.5e-4);
  EXPECT_EQ(cfg.train.steps, 10);
  EXPECT_EQ(cfg.profile.trace_steps, (std::vector<int>{5, 9}));
  EXPECT_EQ(cfg.run.threads, 0);
  EXPECT_EQ(cfg.optimizer.betas, (std::array<double, 2>{0.5, 0.6}));
  EXPECT_FALSE(cfg.comm.overlap);
  EXPECT_EQ(cfg.data.val_path, "v.bin");
  EXPECT_EQ(parse("", {"profile.trace_steps=[]"}).profile.trace_steps, std::vector<int>{});
  EXPECT_EQ(parse("run: {threads: 4}\n", {"run.threads=auto"}).run.threads, 0);
  EXPECT_EQ(parse("", {"train.steps=1", "train.steps=2"}).train.steps, 2);  // last one wins
  Config section = parse("", {"train={steps: 7, lr: 0.5}"});
  EXPECT_EQ(section.train.steps, 7);
  EXPECT_EQ(section.train.lr, 0.5);
}

TEST(Config, OverrideErrorsNameTheFlag) {
  EXPECT_EQ(error_of("", {"train.lrr=1"}),
            "--set train.lrr=1: unknown key 'train.lrr'; did you mean 'train.lr'?");
  EXPECT_EQ(error_of("", {"train.lr"}),
            "--set train.lr: expected KEY=VALUE, e.g. --set train.lr=1e-3");
  EXPECT_EQ(error_of("", {"=3"}), "--set =3: expected KEY=VALUE, e.g. --set train.lr=1e-3");
  EXPECT_EQ(error_of("", {"train.steps=abc"}),
            "--set train.steps: 'train.steps' must be an integer, got 'abc'");
  EXPECT_EQ(error_of("", {"model.n_layers=0"}),
            "--set model.n_layers: 'model.n_layers' must be in [1, 65536], got 0");
  EXPECT_EQ(error_of("", {"profile.trace_steps=[5,"}),
            "--set profile.trace_steps=[5,: VALUE is not valid YAML: end of sequence flow not "
            "found");
  EXPECT_EQ(error_of("", {"train={lrr: 1}"}),
            "--set train: unknown key 'train.lrr'; did you mean 'train.lr'?");
  // A cross-field violation caused by an override points at the override, even when the
  // other key of the rule was set in the file.
  EXPECT_EQ(error_of("model: {d_model: 128}\n", {"model.n_heads=5"}),
            "--set model.n_heads: 'model.d_model' (128) must be divisible by 'model.n_heads' (5)");
  EXPECT_EQ(error_of("model:\n  n_heads: 4\n  d_model: 128\n", {"model.d_model=130"}),
            "--set model.d_model: 'model.d_model' (130) must be divisible by 'model.n_heads' (4)");
}

// run.overwrite deletes a run: an action of one command, so a saved config (config.yaml of a
// run) must never carry it into a re-run.
TEST(Config, OverwriteIsACommandLineActionNeverSaved) {
  EXPECT_TRUE(parse("", {"run.overwrite=true"}).run.overwrite);
  EXPECT_EQ(error_of("run:\n  overwrite: true\n"),
            "x.yaml:2:14: 'run.overwrite' is an action of one command, not part of an "
            "experiment: give it on the command line (--set run.overwrite=true) so that a saved "
            "config never repeats it");
  EXPECT_NE(error_of("run: {overwrite: false}\n"), "");
  EXPECT_TRUE(parse("", {"run={overwrite: true}"}).run.overwrite);
  const std::string saved = config_to_yaml(parse("", {"run.overwrite=true"}));
  EXPECT_EQ(saved.find("overwrite"), std::string::npos) << saved;
  EXPECT_FALSE(parse(saved).run.overwrite);
}

TEST(Config, RoundTripDefaults) {
  Config defaults;
  Config back = parse_config(config_to_yaml(defaults), "");
  EXPECT_EQ(back, defaults);
}

// Every key this build lets a user change (comm.backend nccl needs run.device cuda: see
// NcclNeedsCuda; run.device cuda takes onebit_adam on nccl only: see
// CudaRunsOneBitAdamOnNcclOnlyAndTakesEveryDtype).
TEST(Config, RoundTripEveryKeyChanged) {
  Config c;
  c.source_path = "effective.yaml";
  c.run = {"yes", "out dir/with: colon", 18446744073709551615ull, Device::cpu, 7, false};
  c.model = {1000, 64, 96, 3, 3};
  c.data = {DataSourceKind::file, "shards/*_train_*.bin", "val.bin", false, DataFormat::llmc};
  c.train = {11, 3, 5, 45, 1.0 / 3.0, 0.0, 2, LrScheduleKind::linear, 0.0, 0.0, 0, 1, 0};
  c.precision.dtype = DType::f16;
  c.precision.loss_scale = {
      LossScaleMode::static_, 1234567.891, 1.0000001, 1e-300, 1, 2, 5e-324, 1};
  c.recompute = {RecomputePolicy::every_k, 3};
  c.optimizer = {OptimizerKind::onebit_adam, {0.0, 0.1 + 0.2}, 1e-12, {1, OneBitScale::l2}};
  c.comm = {CommBackend::mpi, AllreduceAlgo::native, 0.001, false, {12.5, 3.0}};
  c.profile = {false, 10, {}, 989.5};
  c.checkpoint = {7, 1, "runs/x/checkpoints/step-7"};
  std::string yaml = config_to_yaml(c);
  Config back = parse_config(yaml, "effective.yaml");
  EXPECT_EQ(back, c) << yaml;
  EXPECT_EQ(config_to_yaml(back), yaml);
}

// Sets PATH to every name of E through --set: a built value decodes to its enum value and
// survives config_to_yaml; a value marked not built is refused.
template <class E, class Get>
void ExpectEveryNameRoundTrips(const std::string& path, Get get,
                               const std::vector<E>& not_built = {}) {
  for (const EnumName<E>& n : enum_names(E{})) {
    const std::string set = path + "=" + n.name;
    if (std::find(not_built.begin(), not_built.end(), n.value) != not_built.end()) {
      EXPECT_NE(error_of("", {set}).find("not implemented yet"), std::string::npos) << set;
      continue;
    }
    const bool needs_file =
        path == "data.format" || (path == "data.source" && n.name == std::string_view("file"));
    Config c = parse(needs_file ? "data: {source: file, path: t.bin}\n" : "", {set});
    EXPECT_EQ(get(c), n.value) << set;
    Config back = parse(config_to_yaml(c));
    EXPECT_EQ(get(back), n.value) << set;
    EXPECT_EQ(back, c) << set;
  }
}

TEST(Config, EveryEnumNameRoundTrips) {
  ExpectEveryNameRoundTrips<Device>("run.device", [](Config& c) { return c.run.device; });
  ExpectEveryNameRoundTrips<DataSourceKind>("data.source", [](Config& c) { return c.data.source; });
  ExpectEveryNameRoundTrips<DataFormat>("data.format", [](Config& c) { return c.data.format; });
  ExpectEveryNameRoundTrips<LrScheduleKind>("train.schedule",
                                            [](Config& c) { return c.train.schedule; });
  ExpectEveryNameRoundTrips<DType>("precision.dtype", [](Config& c) { return c.precision.dtype; });
  ExpectEveryNameRoundTrips<LossScaleMode>("precision.loss_scale.mode",
                                           [](Config& c) { return c.precision.loss_scale.mode; });
  ExpectEveryNameRoundTrips<RecomputePolicy>("recompute.policy",
                                             [](Config& c) { return c.recompute.policy; });
  ExpectEveryNameRoundTrips<OptimizerKind>("optimizer.name",
                                           [](Config& c) { return c.optimizer.name; });
  ExpectEveryNameRoundTrips<OneBitScale>("optimizer.onebit.scale",
                                         [](Config& c) { return c.optimizer.onebit.scale; });
  ExpectEveryNameRoundTrips<OneBitCompress>("optimizer.onebit.compress",
                                            [](Config& c) { return c.optimizer.onebit.compress; });
  ExpectEveryNameRoundTrips<AllreduceAlgo>("comm.allreduce",
                                           [](Config& c) { return c.comm.allreduce; });
}

// Each table names every enumerator (values 0..N-1, for enums with default values) once,
// in the order messages and docs list them.
template <class E>
void ExpectCompleteTable(const std::string& names) {
  std::set<int> values;
  std::set<std::string> seen;
  for (const EnumName<E>& n : enum_names(E{})) {
    values.insert(static_cast<int>(n.value));
    seen.insert(n.name);
    EXPECT_STREQ(name(n.value), n.name);
    EXPECT_EQ(find_name<E>(n.name), n.value);
  }
  const size_t size = enum_names(E{}).size();
  EXPECT_EQ(values.size(), size) << names;
  EXPECT_EQ(seen.size(), size) << names;
  EXPECT_EQ(*values.rbegin(), static_cast<int>(size) - 1) << names;
  EXPECT_EQ(names_of<E>(), names);
}

TEST(Config, NameTablesAreComplete) {
  ExpectCompleteTable<Device>("cpu, cuda");
  ExpectCompleteTable<DataSourceKind>("synthetic, file");
  ExpectCompleteTable<DataFormat>("auto, ringstep, llmc");
  ExpectCompleteTable<LrScheduleKind>("cosine, linear, constant");
  ExpectCompleteTable<DType>("fp32, bf16, fp16");
  ExpectCompleteTable<LossScaleMode>("auto, dynamic, static, none");
  ExpectCompleteTable<RecomputePolicy>("none, full, every_k, selective");
  ExpectCompleteTable<OptimizerKind>("adamw, onebit_adam, zero_one_adam");
  ExpectCompleteTable<OneBitScale>("mean_abs, l2");
  ExpectCompleteTable<CommBackend>("mpi, nccl");
  ExpectCompleteTable<AllreduceAlgo>("ring, native");
  EXPECT_FALSE(find_name<AllreduceAlgo>("nccl").has_value());
  EXPECT_EQ(parse_name<AllreduceAlgo>("native", "allreduce algorithm"), AllreduceAlgo::native);
  try {
    parse_name<AllreduceAlgo>("rnig", "allreduce algorithm");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "unknown allreduce algorithm 'rnig'; expected one of ring, native");
  }
}

// comm.backend nccl loads and round-trips with run.device cuda (whether this build has
// NCCL and a GPU is usable is the launcher's question, exit 2 there); on cpu it is refused
// naming both keys.
TEST(Config, NcclNeedsCuda) {
  for (const char* backend : {"mpi", "nccl"}) {
    Config c = parse(std::string("run: {device: cuda}\ncomm: {backend: ") + backend + "}\n");
    EXPECT_EQ(name(c.comm.backend), std::string(backend));
    EXPECT_EQ(parse(config_to_yaml(c)), c) << backend;
  }
  EXPECT_EQ(error_of("", {"comm.backend=nccl"}),
            "--set comm.backend: 'comm.backend' nccl reduces gradients in GPU memory: it needs "
            "run.device cuda; use mpi on cpu");
  EXPECT_EQ(error_of("checkpoint: {every: 0, keep: 2, resume: auto}\noptimizer: {name: adamw}\n"
                     "comm: {backend: mpi}\nrun: {device: cpu}\n"),
            "");
}

// run.device cuda loads (whether a GPU is usable is the trainer's question, exit 2 there);
// what the GPU trainer does not run is refused naming the keys: 1-bit Adam runs on cuda
// only through the device path (comm.backend nccl) and with compress always or never.
TEST(Config, CudaRunsOneBitAdamOnNcclOnlyAndTakesEveryDtype) {
  EXPECT_EQ(parse("run: {device: cuda}\nprecision: {dtype: bf16}\n").run.device, Device::cuda);
  EXPECT_EQ(parse("run: {device: cuda}\nprecision: {dtype: fp16}\n").precision.dtype, DType::f16);
  EXPECT_EQ(error_of("", {"run.device=cuda", "optimizer.name=onebit_adam",
                          "optimizer.onebit.compress=always"}),
            "--set optimizer.name: 'optimizer.name' onebit_adam on run.device cuda needs "
            "comm.backend nccl (the compressed exchange on the GPU); comm.backend mpi runs it on "
            "run.device cpu only");
  const std::string auto_refused =
      "'optimizer.onebit.compress' auto (the default) measures the coding on the host path, "
      "which onebit_adam on run.device cuda does not take; set it to always or never";
  EXPECT_EQ(error_of("", {"run.device=cuda", "optimizer.name=onebit_adam", "comm.backend=nccl"}),
            "--set optimizer.name: " + auto_refused);
  EXPECT_EQ(error_of("", {"run.device=cuda", "optimizer.name=onebit_adam", "comm.backend=nccl",
                          "optimizer.onebit.compress=auto"}),
            "--set optimizer.onebit.compress: " + auto_refused);
  for (const char* compress : {"always", "never"}) {
    const Config c =
        parse("", {"run.device=cuda", "optimizer.name=onebit_adam", "comm.backend=nccl",
                   std::string("optimizer.onebit.compress=") + compress});
    EXPECT_EQ(c.optimizer.name, OptimizerKind::onebit_adam) << compress;
    EXPECT_EQ(parse(config_to_yaml(c)), c) << compress;
  }
}

// 1-bit Adam's keys: a misspelt scale names the nearest valid one; the variance needs at
// least one warm-up step.
TEST(Config, OneBitScaleTypoNamesTheNearestAndFreezeStepIsAtLeastOne) {
  EXPECT_EQ(error_of("optimizer:\n  name: onebit_adam\n  onebit: {scale: mean_ab}\n"),
            "x.yaml:3:19: 'optimizer.onebit.scale' must be one of mean_abs, l2, got 'mean_ab'; "
            "did you mean 'mean_abs'?");
  EXPECT_NE(error_of("", {"optimizer.onebit.freeze_step=0"}).find(">= 1"), std::string::npos)
      << error_of("", {"optimizer.onebit.freeze_step=0"});
  EXPECT_EQ(
      parse("", {"optimizer.name=onebit_adam", "optimizer.onebit.scale=l2"}).optimizer.onebit.scale,
      OneBitScale::l2);
}

// 0/1 Adam's schedule knobs are each at least 1, load from a file and from --set, and
// cuda refuses the optimizer naming both keys.
TEST(Config, ZeroOneKnobsAreAtLeastOneAndCpuOnly) {
  for (const char* key :
       {"var_freeze_step", "var_update_scaler", "local_step_scaler", "local_step_clipper"}) {
    const std::string set = std::string("optimizer.zero_one.") + key + "=0";
    EXPECT_EQ(error_of("", {set}), "--set optimizer.zero_one." + std::string(key) +
                                       ": 'optimizer.zero_one." + key + "' must be >= 1, got 0")
        << error_of("", {set});
  }
  const Config c = parse(
      "optimizer:\n  name: zero_one_adam\n  zero_one: {var_freeze_step: 50, var_update_scaler: "
      "4, local_step_scaler: 8, local_step_clipper: 2}\n");
  EXPECT_EQ(c.optimizer.name, OptimizerKind::zero_one_adam);
  EXPECT_EQ(c.optimizer.zero_one, (ZeroOneConfig{50, 4, 8, 2}));
  EXPECT_EQ(error_of("", {"run.device=cuda", "optimizer.name=zero_one_adam"}),
            "--set optimizer.name: 'optimizer.name' zero_one_adam runs on run.device cpu only; "
            "use adamw or onebit_adam on cuda");
}

// The exchange under backward is the default and takes loss scaling, on_nan: skip and
// comm.overlap: false (then it starts after backward) without a refusal.
TEST(Config, OneBitOverlapIsTheDefaultAndRefusesNothing) {
  const std::string ob = "optimizer:\n  name: onebit_adam\n";
  EXPECT_TRUE(parse(ob).optimizer.onebit.overlap);
  EXPECT_TRUE(parse(ob + "precision: {dtype: fp16}\n").optimizer.onebit.overlap);
  EXPECT_NO_THROW(parse(ob + "train: {on_nan: skip}\n"));
  EXPECT_NO_THROW(parse(ob + "comm: {overlap: false}\n"));
}

TEST(Config, EmittedYamlListsEveryKeyInDesignOrder) {
  std::string yaml = config_to_yaml(Config{});
  size_t last = 0;
  for (const char* section : {"run:", "model:", "data:", "train:", "precision:", "recompute:",
                              "optimizer:", "comm:", "profile:", "checkpoint:"}) {
    size_t at = yaml.find(std::string("\n") + section);
    if (std::string(section) == "run:") at = yaml.rfind(section, 0);
    ASSERT_NE(at, std::string::npos) << section;
    EXPECT_GE(at, last) << section;
    last = at;
  }
  EXPECT_NE(yaml.find("  threads: auto\n"), std::string::npos);
  EXPECT_NE(yaml.find("  path: null\n"), std::string::npos);
  EXPECT_NE(yaml.find("  betas: [0.9, 0.95]\n"), std::string::npos);
  EXPECT_NE(yaml.find("  eps: 1.0e-08\n"), std::string::npos);
  EXPECT_NE(yaml.find("    growth_interval: 2000\n"), std::string::npos);
}

TEST(Config, KeysAreUniqueAndSectionsContiguous) {
  std::vector<std::string> keys = config_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  EXPECT_EQ(keys.front(), "run.name");
  std::set<std::string> closed;
  std::string current;
  for (const std::string& k : keys) {
    std::string section = k.substr(0, k.rfind('.'));
    if (section != current) {
      EXPECT_FALSE(closed.count(section)) << k << " is apart from the rest of " << section;
      closed.insert(current);
      current = section;
    }
  }
}

TEST(Config, ShippedConfigsLoad) {
  Config tiny = load_config(RINGSTEP_SOURCE_DIR "/configs/tiny.yaml");
  Config defaults;
  defaults.source_path = tiny.source_path;
  EXPECT_EQ(tiny, defaults);  // tiny.yaml spells out the defaults
  EXPECT_EQ(tiny.run.name, "tiny");
  EXPECT_EQ(tiny.train.lr, 6.0e-3);
  EXPECT_EQ(tiny.train.steps, 600);

  Config small = load_config(RINGSTEP_SOURCE_DIR "/configs/small.yaml", {"train.steps=3"});
  EXPECT_EQ(small.run.name, "small");
  EXPECT_EQ(small.run.out_dir, "runs/small");
  EXPECT_EQ(small.model.seq_len, 256);
  EXPECT_EQ(small.model.d_model, 384);
  EXPECT_EQ(small.model.n_layers, 6);
  EXPECT_EQ(small.model.n_heads, 6);
  EXPECT_EQ(small.train.micro_batch, 4);
  EXPECT_EQ(small.train.grad_accum_steps, 1);
  EXPECT_EQ(small.train.steps, 3);
  EXPECT_EQ(small.train.lr, 1e-3);
  EXPECT_EQ(small.train.warmup_steps, 10);
  EXPECT_EQ(small.train.eval_every, 0);
  EXPECT_EQ(small.profile.log_every, 1);
}

TEST(Config, ValidateForWorld) {
  Config cfg = parse("train: {micro_batch: 8, grad_accum_steps: 2}\n");
  EXPECT_NO_THROW(validate_for_world(cfg, 3));  // global_batch 0: derived
  cfg.train.global_batch = 32;
  EXPECT_NO_THROW(validate_for_world(cfg, 2));
  try {
    validate_for_world(cfg, 4);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "x.yaml: 'train.global_batch' is 32 but micro_batch (8) x grad_accum_steps (2) x "
                 "world_size (4) = 64 sequences; the global batch must equal that product (e.g. "
                 "set train.grad_accum_steps=1), or set train.global_batch=0 to derive it");
  }
  cfg.train.global_batch = 20;
  try {
    validate_for_world(cfg, 4);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("e.g."), std::string::npos) << e.what();
  }
}

// docs/configs.md embeds the generated key reference between two markers; regenerate with
// RINGSTEP_UPDATE_DOCS=1 ringstep_tests --gtest_filter=Config.DocsMatchSchema
TEST(Config, DocsMatchSchema) {
  const std::string path = RINGSTEP_SOURCE_DIR "/docs/configs.md";
  const std::string begin = "<!-- BEGIN KEYS (generated by config_reference_markdown) -->\n";
  const std::string end = "<!-- END KEYS -->";
  std::string doc = read_text(path);
  size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << path;
  ASSERT_NE(e, std::string::npos) << path;
  b += begin.size();
  std::string generated = config_reference_markdown();
  if (std::getenv("RINGSTEP_UPDATE_DOCS")) {
    doc.replace(b, e - b, generated);
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(doc.substr(b, e - b), generated) << "docs/configs.md is stale; see the comment above";
}

}  // namespace
}  // namespace ringstep
