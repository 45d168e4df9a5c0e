#include "train/export.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace ringstep
