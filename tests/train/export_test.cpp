#include "train/export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/checksum.h"
#include "core/error.h"
#include "core/rng.h"
#include "models/gpt.h"
#include "train/checkpoint.h"
#include "train/small_run.h"
#include "train/token_file.h"
#include "train/trainer.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

// A 2-layer model whose every parameter (biases and LayerNorms too) is away from its
// initial value, so a misplaced or untransposed tensor changes the loss.
Gpt PerturbedModel(const ModelConfig& mc) {
  Gpt model(mc);
  model.init(7);
  float* p = model.params().data();
  for (size_t i = 0; i < model.params().size(); ++i) p[i] += 0.05f * rng_normal(7, 99, i);
  return model;
}

struct SafeTensors {
  nlohmann::json header;
  std::string data;
};

SafeTensors ReadSafeTensors(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(file[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  return {nlohmann::json::parse(file.substr(8, n)), file.substr(8 + n)};
}

TEST(Export, RegistryNamesMapToGpt2) {
  EXPECT_EQ(gpt2_name("wte").name, "wte.weight");
  EXPECT_FALSE(gpt2_name("wpe").transposed);
  EXPECT_EQ(gpt2_name("h.3.ln1.bias").name, "h.3.ln_1.bias");
  EXPECT_EQ(gpt2_name("h.0.attn.qkv.weight").name, "h.0.attn.c_attn.weight");
  EXPECT_TRUE(gpt2_name("h.0.attn.qkv.weight").transposed);
  EXPECT_EQ(gpt2_name("h.1.attn.proj.bias").name, "h.1.attn.c_proj.bias");
  EXPECT_FALSE(gpt2_name("h.1.attn.proj.bias").transposed);
  EXPECT_EQ(gpt2_name("h.2.mlp.fc.weight").name, "h.2.mlp.c_fc.weight");
  EXPECT_EQ(gpt2_name("h.2.mlp.proj.weight").name, "h.2.mlp.c_proj.weight");
  EXPECT_FALSE(gpt2_name("h.2.ln2.weight").transposed);
  EXPECT_EQ(gpt2_name("lnf.weight").name, "ln_f.weight");
}

// Every tensor is in the file with GPT-2's shape, the byte ranges tile the data, and a
// linear weight is stored transposed ([in, out]) bit for bit.
TEST(Export, SafetensorsHoldEveryTensorInGpt2Layout) {
  const ModelConfig mc{64, 16, 32, 2, 2};
  const Gpt model = PerturbedModel(mc);
  const fs::path path = fs::temp_directory_path() / ("ringstep_export_" + std::to_string(getpid()));
  export_safetensors(model, path.string());
  const SafeTensors st = ReadSafeTensors(path);
  fs::remove(path);
  EXPECT_EQ(st.header["__metadata__"]["n_head"], "2");
  size_t end = 0;
  for (const TensorInfo& t : model.registry().tensors()) {
    const Gpt2Name g = gpt2_name(t.name);
    const auto& h = st.header.at(g.name);
    EXPECT_EQ(h["dtype"], "F32");
    std::vector<int64_t> shape = t.shape;
    if (g.transposed) std::swap(shape[0], shape[1]);
    EXPECT_EQ(h["shape"].get<std::vector<int64_t>>(), shape) << g.name;
    EXPECT_EQ(h["data_offsets"][0].get<size_t>(), end) << g.name;
    end = h["data_offsets"][1].get<size_t>();
    EXPECT_EQ(end - h["data_offsets"][0].get<size_t>(), t.numel * sizeof(float));
  }
  EXPECT_EQ(end, st.data.size());
  const TensorInfo& qkv = model.registry().find("h.1.attn.qkv.weight");  // [3C, C]
  const float* ours = model.params().at(qkv);
  const auto* theirs = reinterpret_cast<const float*>(
      st.data.data() + st.header["h.1.attn.c_attn.weight"]["data_offsets"][0].get<size_t>());
  const int64_t rows = qkv.shape[0], cols = qkv.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(std::memcmp(&ours[r * cols + c], &theirs[c * rows + r], 4), 0) << r << "," << c;
}

// What `ringstep export RUN_DIR` reads: the newest checkpoint's parameters, bit for bit the
// ones the run ended with.
TEST(Export, RunDirectoryResolvesToItsNewestCheckpointsParameters) {
  const fs::path out =
      fs::temp_directory_path() / ("ringstep_export_run_" + std::to_string(getpid()));
  fs::remove_all(out);
  Config cfg = ringstep::testing::SmallRun(out.string(), 4);
  cfg.checkpoint.every = 2;
  const TrainOutcome r = train(cfg, nullptr);
  const std::string dir = checkpoint_at(out.string());
  EXPECT_EQ(fs::path(dir).filename(), "step-4");
  Gpt model(cfg.model);
  load_checkpoint_params(dir, cfg, model.params());
  EXPECT_EQ(fnv1a64(model.params().data(), model.params().bytes()), r.params_fnv1a64);
  EXPECT_THROW(checkpoint_at((out / "checkpoints").string()), InputError);
  fs::remove_all(out);
}

// The exported model in plain PyTorch (tools/load_in_pytorch.py, fp64) gives ringstep's
// evaluation loss (fp32) on the same windows within 1e-4.
TEST(Export, PyTorchLossMatchesRingstep) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "PyTorch is not installed (Debian: python3-torch); the export's PyTorch "
                    "check is skipped";
  const ModelConfig mc{64, 16, 32, 2, 2};
  Gpt model = PerturbedModel(mc);
  const int B = 2, T = 16, batches = 3;
  const fs::path dir =
      fs::temp_directory_path() / ("ringstep_export_pt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<uint16_t> tokens(size_t(B) * batches * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(rng_u32(3, 4, i) % 64);
  write_token_file((dir / "t.bin").string(), 64, tokens);
  export_safetensors(model, (dir / "m.safetensors").string());

  Arena arena(model.count_arena_bytes(B, T));
  double sum = 0;
  std::vector<int32_t> in(size_t(B) * T), tg(in.size());
  for (int b = 0; b < batches; ++b) {
    for (int s = 0; s < B; ++s)
      for (int t = 0; t < T; ++t) {
        const size_t w = (size_t(b) * B + s) * (T + 1);
        in[size_t(s) * T + t] = tokens[w + t];
        tg[size_t(s) * T + t] = tokens[w + t + 1];
      }
    sum += model.evaluate(in.data(), tg.data(), B, T, arena);
  }
  const std::string cmd = "/usr/bin/python3 " RINGSTEP_SOURCE_DIR "/tools/load_in_pytorch.py " +
                          (dir / "m.safetensors").string() + " " + (dir / "t.bin").string() +
                          " --batches 3 --batch-size 2 --json";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[512] = "";
  const size_t got = fread(buf, 1, sizeof buf - 1, pipe);
  ASSERT_EQ(pclose(pipe), 0) << cmd;
  fs::remove_all(dir);
  const double torch_loss = nlohmann::json::parse(std::string(buf, got))["loss"].get<double>();
  EXPECT_NEAR(torch_loss, sum / batches, 1e-4);
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Export then import gives back every parameter bit for bit, whatever the model held before.
TEST(Import, SafetensorsRoundTripIsBitExact) {
  const ModelConfig mc{64, 16, 32, 2, 2};
  const Gpt exported = PerturbedModel(mc);
  const fs::path path = fs::temp_directory_path() / ("ringstep_import_" + std::to_string(getpid()));
  export_safetensors(exported, path.string());
  Gpt model(mc);
  model.init(3);
  import_safetensors(path.string(), model);
  EXPECT_EQ(fnv1a64(model.params().data(), model.params().bytes()),
            fnv1a64(exported.params().data(), exported.params().bytes()));
  fs::remove(path);
}

// A padded vocabulary (model.pad_vocab_to_multiple) is exported as GPT-2 has it, vocab_size
// rows; imported, into a padded model or not, the real rows come back bit for bit and a
// padded model's padded rows are zero.
TEST(Import, PaddedVocabularyExportsAndImportsItsRealRows) {
  ModelConfig mc{61, 16, 32, 2, 2};
  mc.pad_vocab_to_multiple = 64;
  const Gpt exported = PerturbedModel(mc);  // padded rows perturbed too: not exported
  const fs::path path =
      fs::temp_directory_path() / ("ringstep_import_pad_" + std::to_string(getpid()));
  export_safetensors(exported, path.string());
  EXPECT_EQ(ReadSafeTensors(path).header["wte.weight"]["shape"], nlohmann::json({61, 32}));
  ModelConfig plain = mc;
  plain.pad_vocab_to_multiple = 1;
  for (const ModelConfig& into : {mc, plain}) {
    Gpt model(into);
    model.init(3);
    import_safetensors(path.string(), model);
    for (size_t i = 0; i < model.registry().size(); ++i) {
      const TensorInfo& t = model.registry().at(i);
      const size_t real = i == model.spec().wte() ? size_t(61 * 32) : t.numel;
      EXPECT_EQ(std::memcmp(model.params().at(t), exported.params().at(exported.registry().at(i)),
                            real * sizeof(float)),
                0)
          << t.name;
      EXPECT_EQ(std::count(model.params().at(t) + real, model.params().at(t) + t.numel, 0.0f),
                long(t.numel - real))
          << t.name;
    }
  }
  fs::remove(path);
}

// A bad file is refused naming what is wrong, and the model keeps its weights.
TEST(Import, BadFilesAreRefusedAndLeaveTheModelUntouched) {
  const ModelConfig mc{64, 16, 32, 2, 2};
  const fs::path dir =
      fs::temp_directory_path() / ("ringstep_import_bad_" + std::to_string(getpid()));
  fs::create_directories(dir);
  export_safetensors(PerturbedModel(mc), (dir / "good.safetensors").string());
  const std::string good = Slurp(dir / "good.safetensors");
  Gpt model(mc);
  model.init(3);
  const uint64_t before = fnv1a64(model.params().data(), model.params().bytes());
  auto error_of = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    try {
      import_safetensors((dir / name).string(), model);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no InputError");
  };
  auto expect = [&](const std::string& error, const std::string& part) {
    EXPECT_NE(error.find(part), std::string::npos) << error;
  };
  expect(error_of("cut", good.substr(0, good.size() - 4)), "which do not hold 32 floats inside");
  expect(error_of("tiny", "abc"), "not a safetensors file");
  expect(error_of("garbage", std::string(8, '\x7f') + "{}"), "header length");
  std::string f16 = good;
  f16.replace(f16.find("\"F32\""), 5, "\"F16\"");
  expect(error_of("f16", f16), "has dtype \"F16\", expected \"F32\"");
  Gpt wider(ModelConfig{64, 16, 64, 2, 2});
  wider.init(1);
  export_safetensors(wider, (dir / "wider").string());
  expect(error_of("wider2", Slurp(dir / "wider")), "this model's is [64,32]");
  std::string renamed = good;
  renamed.replace(renamed.find("wte.weight"), 10, "wtx.weight");
  expect(error_of("renamed", renamed), "tensor wte.weight is missing");
  EXPECT_EQ(fnv1a64(model.params().data(), model.params().bytes()), before);
  fs::remove_all(dir);
}

// train.init_from starts a new run from another run's weights (its newest checkpoint, or
// the same weights exported), with a fresh optimizer: both give the same steps, bit for bit.
TEST(Import, InitFromCheckpointOrSafetensorsStartsFromThoseWeights) {
  const fs::path dir = fs::temp_directory_path() / ("ringstep_init_" + std::to_string(getpid()));
  fs::remove_all(dir);
  Config pre = ringstep::testing::SmallRun((dir / "pre").string(), 6);
  pre.checkpoint.every = 6;
  train(pre, nullptr);
  Gpt model(pre.model);
  load_checkpoint_params(checkpoint_at((dir / "pre").string()), pre, model.params());
  export_safetensors(model, (dir / "pre.safetensors").string());

  auto fine_tune = [&](const std::string& name, const std::string& from) {
    Config cfg = ringstep::testing::SmallRun((dir / name).string(), 3);
    cfg.train.init_from = from;
    return train(cfg, nullptr);
  };
  const TrainOutcome fresh = fine_tune("fresh", "");
  const TrainOutcome from_run = fine_tune("a", (dir / "pre").string());
  const TrainOutcome from_file = fine_tune("b", (dir / "pre.safetensors").string());
  EXPECT_EQ(from_run.losses, from_file.losses);
  EXPECT_EQ(from_run.params_fnv1a64, from_file.params_fnv1a64);
  EXPECT_EQ(from_run.optimizer_steps, 3);  // Adam starts afresh
  EXPECT_LT(from_run.losses[0], fresh.losses[0] - 0.05)
      << "the pre-trained weights were not loaded";
  Config missing = ringstep::testing::SmallRun((dir / "c").string(), 3);
  missing.train.init_from = (dir / "nowhere").string();
  EXPECT_THROW(train(missing, nullptr), InputError);
  EXPECT_FALSE(fs::exists(dir / "c"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringstep
