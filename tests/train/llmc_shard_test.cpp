// llm.c's token shards and the token stream that reads them: the bytes llm.c writes, read
// back exactly; globs of shards in sorted order; the format told by the magic; every bad
// header an InputError naming the file.
#include "train/llmc_shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "train/data.h"
#include "train/temp_dir_test.h"
#include "train/token_file.h"
#include "train/token_stream.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

// An llm.c shard's bytes exactly as dev/data/data_common.py's write_datafile builds them
// with numpy, written out here by hand rather than by write_llmc_shard: np.int32 header of
// 256 (magic, version, count, zeros), then np.uint16 tokens, all little-endian.
std::string llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                       int32_t version = 1, int64_t count = -1) {
  std::string b(1024, '\0');
  auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) b[at + k] = char(v >> (8 * k));
  };
  put32(0, uint32_t(magic));
  put32(4, uint32_t(version));
  put32(8, uint32_t(count < 0 ? int64_t(tokens.size()) : count));
  for (uint16_t t : tokens) b += {char(t & 0xff), char(t >> 8)};
  return b;
}

std::vector<uint16_t> iota(size_t n, uint16_t from = 0) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(from + i);
  return t;
}

class LlmcShard : public ringstep::testing::TempDirTest {
 protected:
  TokenStream open(const std::string& name, DataFormat format = DataFormat::auto_,
                   int vocab = 50257) const {
    return open_token_stream("data.path", path(name), format, vocab);
  }
  static std::vector<int32_t> all(const TokenStream& s) {
    std::vector<int32_t> out(s.size());
    s.read(0, out.size(), out.data());
    return out;
  }
  // Expects opening NAME to throw an InputError that names the file and holds FRAGMENT.
  void expect_bad(const std::string& name, const std::string& fragment,
                  DataFormat format = DataFormat::auto_, int vocab = 50257) const {
    try {
      open(name, format, vocab);
      ADD_FAILURE() << name << ": no InputError, expected: " << fragment;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
      if (name.find_first_of("*?[") == std::string::npos)  // else FRAGMENT names the file
        EXPECT_NE(msg.find(path(name)), std::string::npos) << "names the file: " << msg;
    }
  }

};

TEST_F(LlmcShard, WriterWritesTheBytesOfLlmcsWriteDatafile) {
  const std::vector<uint16_t> tokens = {50256, 0, 1, 258, 50255, 65535, 7};
  write_llmc_shard(path("w.bin"), tokens);
  EXPECT_EQ(read_bytes("w.bin"), llmc_bytes(tokens));
  EXPECT_FALSE(fs::exists(path("w.bin.tmp")));
}

TEST_F(LlmcShard, TokensReadBackExactlyAndTheFormatIsSniffed) {
  std::vector<uint16_t> tokens = iota(3000, 47000);  // GPT-2 ids up to 49999
  tokens[5] = 50256;                                 // <|endoftext|>, the largest id
  write_bytes("gpt2.bin", llmc_bytes(tokens));
  for (DataFormat format : {DataFormat::auto_, DataFormat::llmc}) {
    const TokenStream s = open("gpt2.bin", format);
    ASSERT_EQ(s.shards().size(), 1u);
    EXPECT_EQ(s.shards()[0].format, DataFormat::llmc);
    EXPECT_EQ(s.size(), tokens.size());
    EXPECT_EQ(all(s), std::vector<int32_t>(tokens.begin(), tokens.end()));
    EXPECT_EQ(s.describe(), "llm.c shard " + path("gpt2.bin") + ": 3000 tokens");
  }
  write_token_file(path("ours.bin"), 256, iota(100));
  EXPECT_EQ(open("ours.bin").shards()[0].format, DataFormat::ringstep);
}

TEST_F(LlmcShard, RejectsBadHeadersNamingTheFile) {
  const std::vector<uint16_t> tokens = iota(100, 1);
  write_bytes("magic.bin", llmc_bytes(tokens, 20240519));
  expect_bad("magic.bin",
             "not an llm.c shard (data.format is llmc; its first int32 is 20240519, not 20240520)",
             DataFormat::llmc);
  expect_bad("magic.bin", "not a token file: it starts with neither ringstep's magic");
  write_token_file(path("ours.bin"), 256, tokens);
  expect_bad("ours.bin", "it is a ringstep token file; set data.format to ringstep or auto",
             DataFormat::llmc);
  write_bytes("theirs.bin", llmc_bytes(tokens));
  expect_bad("theirs.bin",
             "not a ringstep token file (data.format is ringstep; its magic is not \"RSTOKENS\"",
             DataFormat::ringstep);
  expect_bad("theirs.bin", "it is an llm.c shard; set data.format to llmc or auto",
             DataFormat::ringstep);
  write_bytes("version.bin", llmc_bytes(tokens, 20240520, 2));
  expect_bad("version.bin", "unsupported llm.c shard version 2 (expected 1)");
  write_bytes("llama.bin", llmc_bytes(tokens, 20240801, 7));
  expect_bad("llama.bin", "an llm.c Llama 3 shard, whose uint32 tokens ringstep does not read");
  write_bytes("eval.bin", llmc_bytes(tokens, 20240522));
  expect_bad("eval.bin", "an llm.c eval file (HellaSwag or MMLU examples), not training tokens");
  const std::string good = llmc_bytes(tokens);  // 1024 + 200 bytes
  write_bytes("cut.bin", good.substr(0, good.size() - 3));
  expect_bad("cut.bin", "truncated: header says 100 tokens (1224 bytes) but file has 1221 bytes");
  write_bytes("long.bin", good + "xy");
  expect_bad("long.bin", "trailing bytes: header says 100 tokens (1224 bytes) but file has 1226");
  write_bytes("count.bin", llmc_bytes(tokens, 20240520, 1, 0xffffffff));
  expect_bad("count.bin", "the header's token count is -1, not a count");
  write_bytes("short.bin", good.substr(0, 100));
  expect_bad("short.bin",
             "truncated: file has 100 bytes, less than the 1024-byte header of an llm.c shard");
  expect_bad("short.bin", "less than the 1024-byte header of an llm.c shard", DataFormat::llmc);
  write_bytes("none.bin", llmc_bytes({}));
  expect_bad("none.bin", "holds no tokens (the header's token count is 0)");
  write_bytes("empty.bin", "");
  expect_bad("empty.bin", "empty file, not a token file");
  expect_bad("empty.bin", "truncated: file has 0 bytes", DataFormat::llmc);
  expect_bad("missing.bin", "cannot read token file '");
}

TEST_F(LlmcShard, RejectsATokenOutsideTheModelsVocabulary) {
  std::vector<uint16_t> tokens = iota(100'000);  // more than one block of the scan
  for (uint16_t& t : tokens) t %= 50257;
  write_bytes("ok.bin", llmc_bytes(tokens));
  EXPECT_EQ(open("ok.bin").size(), tokens.size());
  tokens[70'000] = 50257;  // in the second block
  write_bytes("bad.bin", llmc_bytes(tokens));
  expect_bad("bad.bin",
             "token 70000 (byte offset 141024) is 50257, not below model.vocab_size 50257");
  expect_bad("ok.bin", "token 256 (byte offset 1536) is 256, not below model.vocab_size 256",
             DataFormat::auto_, 256);
}

TEST_F(LlmcShard, AGlobIsItsFilesInSortedOrderReadAsOneStream) {
  // Written out of order; names whose sort differs from their creation and a file the
  // pattern does not match. Stream token i is i.
  write_bytes("data_train_000002.bin", llmc_bytes(iota(7, 500)));
  write_bytes("data_train_000000.bin", llmc_bytes(iota(300, 0)));
  write_bytes("data_train_000001.bin", llmc_bytes(iota(200, 300)));
  write_bytes("data_val_000000.bin", llmc_bytes(iota(50, 9000)));
  const TokenStream s = open("data_train_*.bin");
  ASSERT_EQ(s.shards().size(), 3u);
  EXPECT_EQ(s.shards()[0].path, path("data_train_000000.bin"));
  EXPECT_EQ(s.shards()[1].path, path("data_train_000001.bin"));
  EXPECT_EQ(s.shards()[2].path, path("data_train_000002.bin"));
  EXPECT_EQ(s.shards()[1].first, 300u);
  EXPECT_EQ(s.size(), 507u);
  const std::vector<int32_t> got = all(s);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], int32_t(i)) << "stream token " << i;
  std::vector<int32_t> across(10);
  s.read(295, 10, across.data());  // shard 0's end into shard 1
  EXPECT_EQ(across, std::vector<int32_t>({295, 296, 297, 298, 299, 300, 301, 302, 303, 304}));
  s.read(498, 9, across.data());  // across the last boundary to the very end
  EXPECT_EQ(across[8], 506);
  EXPECT_THROW(s.read(500, 8, across.data()), std::out_of_range);
  EXPECT_EQ(s.describe(),
            "3 files matching '" + path("data_train_*.bin") + "' (llm.c shards): 507 tokens");
}

TEST_F(LlmcShard, EachFileOfAGlobIsSniffedOnItsOwn) {
  write_token_file(path("a.bin"), 256, iota(40));
  write_bytes("b.bin", llmc_bytes(iota(30, 40)));
  const TokenStream s = open("?.bin", DataFormat::auto_, 256);
  ASSERT_EQ(s.shards().size(), 2u);
  EXPECT_EQ(s.shards()[0].format, DataFormat::ringstep);
  EXPECT_EQ(s.shards()[1].format, DataFormat::llmc);
  const std::vector<uint16_t> both = iota(70);
  EXPECT_EQ(all(s), std::vector<int32_t>(both.begin(), both.end()));
  EXPECT_NE(s.describe().find("(llm.c shards: 1, ringstep token files: 1)"), std::string::npos);
  // A forced format holds for every file: the first that differs is named.
  expect_bad("?.bin", "a.bin: not an llm.c shard", DataFormat::llmc, 256);
  // The first bad shard of a glob stops the open, named.
  write_bytes("c.bin", llmc_bytes(iota(10), 20240520, 3));
  expect_bad("?.bin", "c.bin: unsupported llm.c shard version 3", DataFormat::auto_, 256);
}

TEST_F(LlmcShard, AGlobThatMatchesNothingOrADirectoryIsAnInputError) {
  try {
    open_token_stream("data.val_path", path("*_val_*.bin"), DataFormat::auto_, 256);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "data.val_path '" + path("*_val_*.bin") + "': no file matches the pattern");
  }
  try {
    open_token_stream("data.path", dir_.string(), DataFormat::auto_, 256);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("' is a directory; name a token file, or a glob of "
                                         "files such as '" +
                                         dir_.string() + "/*_train_*.bin'"),
              std::string::npos)
        << e.what();
  }
  // A metacharacter in a file name is escaped.
  write_bytes("odd[1].bin", llmc_bytes(iota(5)));
  EXPECT_EQ(open("odd\\[1\\].bin").size(), 5u);
  // Unescaped, [1] is a bracket expression: it matches odd1.bin, which is not there.
  EXPECT_THROW(expand_data_path("data.path", path("odd[1].bin")), InputError);
}

// configs/gpt2-124m.yaml with the overrides its comment gives reads llm.c's tinyshakespeare
// files: GPT-2 ids up to <|endoftext|> (50256), refusing one past the vocabulary.
TEST_F(LlmcShard, Gpt2ConfigTrainsOnLlmcsTinyShakespeareFiles) {
  std::vector<uint16_t> train(5000), val(2100);
  for (size_t i = 0; i < train.size(); ++i) train[i] = uint16_t((i * 7919) % 50257);
  for (size_t i = 0; i < val.size(); ++i) val[i] = uint16_t(50256 - i);
  write_bytes("tiny_shakespeare_train.bin", llmc_bytes(train));
  write_bytes("tiny_shakespeare_val.bin", llmc_bytes(val));
  const std::vector<std::string> sets = {"data.source=file",
                                         "data.path=" + path("tiny_shakespeare_train.bin"),
                                         "data.val_path=" + path("tiny_shakespeare_val.bin")};
  const Config cfg = load_config(RINGSTEP_SOURCE_DIR "/configs/gpt2-124m.yaml", sets);
  ASSERT_EQ(cfg.model.vocab_size, 50257);
  const int B = 2, T = cfg.model.seq_len;
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  make_data_source(cfg, "val", 0, 1)->next_batch(inputs.data(), targets.data(), B, T);
  EXPECT_EQ(inputs[0], 50256);
  EXPECT_EQ(targets[0], 50255);
  auto source = make_data_source(cfg, "train", 0, 1);
  source->next_batch(inputs.data(), targets.data(), B, T);
  EXPECT_NE(source->describe().find("llm.c shard"), std::string::npos) << source->describe();
  train[4999] = 50257;
  write_bytes("tiny_shakespeare_train.bin", llmc_bytes(train));
  EXPECT_THROW(make_data_source(cfg, "train", 0, 1), InputError);
}

}  // namespace
}  // namespace ringstep
