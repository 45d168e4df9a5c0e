#include "train/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "core/error.h"
#include "train/llmc_shard.h"
#include "train/synthetic.h"
#include "train/token_file.h"
#include "train/token_stream.h"
#include "train/temp_dir_test.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

Config synthetic_config(int vocab = 256, int seq_len = 128, uint64_t seed = 1234) {
  Config cfg;
  cfg.run.seed = seed;
  cfg.model.vocab_size = vocab;
  cfg.model.seq_len = seq_len;
  cfg.data.source = DataSourceKind::synthetic;
  return cfg;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch next(DataSource& source, int B, int T) {
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  source.next_batch(b.inputs.data(), b.targets.data(), B, T);
  return b;
}

// -mean log P(x_t | context) over a sampled stream, and the standard error of that mean
// (i.i.d. formula; the chain mixes fast, and the seeds are fixed, so 4 errors is a stable bound).
struct Estimate {
  double mean, stderr_;
};
template <typename LogProb>
Estimate empirical_entropy(const MarkovChain& chain, int n, uint64_t stream, LogProb log_prob) {
  SplitMix64 rng(99, stream);
  int state = chain.sample_state(rng);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const int token = chain.sample_token(state, rng);
    const double nll = -log_prob(state, token);
    sum += nll;
    sum_sq += nll * nll;
    state = MarkovChain::next_state(state, token);
  }
  const double mean = sum / n;
  return {mean, std::sqrt((sum_sq / n - mean * mean) / n)};
}

TEST(Synthetic, StationaryDistributionIsAFixedPoint) {
  const MarkovChain chain(256, 1234);
  const std::vector<double>& pi = chain.stationary();
  double total = 0;
  for (double p : pi) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
  // (pi P)(s') summed over the two predecessors' bits: s' = (x, a & 1) from s = (a, b).
  std::vector<double> next(pi.size(), 0.0);
  for (int s = 0; s < chain.num_states(); ++s)
    for (int x = 0; x < chain.vocab_size(); ++x)
      next[MarkovChain::next_state(s, x)] += pi[s] * chain.prob(s, x);
  double l1 = 0;
  for (size_t s = 0; s < pi.size(); ++s) l1 += std::fabs(next[s] - pi[s]);
  EXPECT_LT(l1, 1e-11);
}

TEST(Synthetic, TransitionRowsSumToOne) {
  const MarkovChain chain(64, 7);
  for (int s = 0; s < chain.num_states(); ++s) {
    double row = 0;
    for (int x = 0; x < chain.vocab_size(); ++x) row += chain.prob(s, x);
    EXPECT_NEAR(row, 1.0, 1e-12) << "state " << s;
  }
}

TEST(Synthetic, EntropyRateMatchesSampledStream) {
  const MarkovChain chain(256, 1234);
  const Estimate e = empirical_entropy(chain, 2'000'000, 1,
                                       [&](int s, int x) { return std::log(chain.prob(s, x)); });
  EXPECT_NEAR(e.mean, chain.entropy_rate(), 4 * e.stderr_);
}

// H(X1|X0), the first term of the window floor, against a stream scored by a model that
// knows only the previous token: R_a(x) = sum_b pi(a,b) P(x|a,b) / m(a).
TEST(Synthetic, FirstStepEntropyMatchesSampledStream) {
  const MarkovChain chain(256, 1234);
  const std::vector<double>& pi = chain.stationary();
  const Estimate e = empirical_entropy(chain, 2'000'000, 2, [&](int s, int x) {
    const int a0 = s & ~1, a1 = s | 1;
    return std::log((pi[a0] * chain.prob(a0, x) + pi[a1] * chain.prob(a1, x)) / (pi[a0] + pi[a1]));
  });
  EXPECT_NEAR(e.mean, chain.first_step_entropy(), 4 * e.stderr_);
}

TEST(Synthetic, EntropyRateBetweenOneAndThreeNats) {
  for (int vocab : {64, 256, 1024, 4096, 65536}) {
    for (uint64_t seed : {1ull, 1234ull}) {
      const MarkovChain chain(vocab, seed);
      EXPECT_GT(chain.entropy_rate(), 1.0) << "V=" << vocab << " seed=" << seed;
      EXPECT_LT(chain.entropy_rate(), 3.0) << "V=" << vocab << " seed=" << seed;
    }
  }
}

TEST(Synthetic, WindowFloorLiesAboveEntropyRateAndApproachesIt) {
  const MarkovChain chain(256, 1234);
  const double h = chain.entropy_rate();
  EXPECT_GT(chain.first_step_entropy(), h);  // the unseen bit costs something
  EXPECT_DOUBLE_EQ(chain.window_floor(1), chain.first_step_entropy());
  double previous = chain.window_floor(1);
  for (int T : {2, 16, 128, 1024}) {
    const double floor = chain.window_floor(T);
    EXPECT_GE(floor, h);
    EXPECT_LT(floor, previous);
    previous = floor;
  }
  EXPECT_NEAR(chain.window_floor(1 << 20), h, 1e-5);
  const DataInfo info = data_info(synthetic_config());
  EXPECT_DOUBLE_EQ(info.entropy_rate, h);
  EXPECT_DOUBLE_EQ(info.window_floor, chain.window_floor(128));
}

TEST(Synthetic, SameSeedSameBatches) {
  const Config cfg = synthetic_config();
  auto a = make_data_source(cfg, "train", 0, 2);
  auto b = make_data_source(cfg, "train", 0, 2);
  const Batch first = next(*a, 4, 128);
  EXPECT_EQ(first, next(*b, 4, 128));
  EXPECT_EQ(next(*a, 4, 128), next(*b, 4, 128));
  a->reset();
  EXPECT_EQ(first, next(*a, 4, 128));
}

// A fresh stream seeked to another's position continues exactly where that one is.
TEST(Synthetic, SeekToPositionContinuesTheStream) {
  const Config cfg = synthetic_config();
  auto a = make_data_source(cfg, "train", 1, 2);
  next(*a, 3, 128);
  EXPECT_EQ(a->position(), 3u * 129);
  auto b = make_data_source(cfg, "train", 1, 2);
  b->seek(a->position());
  EXPECT_EQ(next(*a, 4, 128), next(*b, 4, 128));
  EXPECT_EQ(a->position(), b->position());
}

TEST(Synthetic, RanksGetDifferentStreamsAndTheSameVal) {
  const Config cfg = synthetic_config();
  EXPECT_NE(next(*make_data_source(cfg, "train", 0, 2), 4, 128),
            next(*make_data_source(cfg, "train", 1, 2), 4, 128));
  const Batch val0 = next(*make_data_source(cfg, "val", 0, 2), 4, 128);
  EXPECT_EQ(val0, next(*make_data_source(cfg, "val", 1, 2), 4, 128));
  EXPECT_NE(val0, next(*make_data_source(cfg, "train", 0, 2), 4, 128));
  Config other = cfg;
  other.run.seed = 1235;
  EXPECT_NE(val0, next(*make_data_source(other, "val", 0, 2), 4, 128));
}

TEST(Synthetic, TargetsAreInputsShiftedByOneAndInVocab) {
  const int B = 8, T = 32, V = 64;
  auto source = make_data_source(synthetic_config(V, T), "train", 0, 1);
  const Batch b = next(*source, B, T);
  for (int i = 0; i < B; ++i)
    for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(b.targets[i * T + t], b.inputs[i * T + t + 1]);
  for (size_t k = 0; k < b.inputs.size(); ++k) {
    EXPECT_TRUE(b.inputs[k] >= 0 && b.inputs[k] < V);
    EXPECT_TRUE(b.targets[k] >= 0 && b.targets[k] < V);
  }
}

// Token files written per test into a fresh directory (TempDirTest).
class TokenFile : public ringstep::testing::TempDirTest {
 protected:
  Config file_config(const std::string& name, int seq_len = 8, int vocab = 256) const {
    Config cfg;
    cfg.model.vocab_size = vocab;
    cfg.model.seq_len = seq_len;
    cfg.data.source = DataSourceKind::file;
    cfg.data.path = path(name);
    return cfg;
  }
  // Expects loading NAME as training data to fail with a message containing FRAGMENT.
  void expect_bad(const Config& cfg, const std::string& fragment) const {
    try {
      make_data_source(cfg, "train", 0, 1);
      ADD_FAILURE() << "no InputError, expected: " << fragment;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  static std::vector<uint16_t> iota_tokens(size_t n, int vocab = 256) {
    std::vector<uint16_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i % vocab);
    return tokens;
  }

};

TEST_F(TokenFile, PrepareRoundTrip) {
  const std::string text = "hello, ringstep\n\xff\x00 bytes"s;
  write_bytes("in.txt", text);
  prepare_tokens(path("in.txt"), path("out.bin"));
  const std::string bytes = read_bytes("out.bin");
  ASSERT_EQ(bytes.size(), 32 + 2 * text.size());
  EXPECT_EQ(bytes.substr(0, 8), "RSTOKENS");
  const std::string expected_header("\x01\0\0\0\x00\x01\0\0", 8);  // version 1, vocab 256
  EXPECT_EQ(bytes.substr(8, 8), expected_header);
  EXPECT_EQ(static_cast<unsigned char>(bytes[16]), text.size());
  EXPECT_EQ(bytes[24], 2);
  const TokenStream file = open_token_stream("data.path", path("out.bin"), DataFormat::auto_, 256);
  ASSERT_EQ(file.shards().size(), 1u);
  EXPECT_EQ(file.shards()[0].format, DataFormat::ringstep);
  EXPECT_EQ(file.shards()[0].layout.vocab, 256u);
  ASSERT_EQ(file.size(), text.size());
  std::vector<int32_t> tokens(text.size());
  file.read(0, tokens.size(), tokens.data());
  for (size_t i = 0; i < text.size(); ++i)
    EXPECT_EQ(tokens[i], static_cast<unsigned char>(text[i]));
  EXPECT_FALSE(fs::exists(path("out.bin.tmp")));
}

TEST_F(TokenFile, PrepareFailuresLeaveNoOutput) {
  EXPECT_THROW(prepare_tokens(path("missing.txt"), path("out.bin")), InputError);
  write_bytes("empty.txt", "");
  EXPECT_THROW(prepare_tokens(path("empty.txt"), path("out.bin")), InputError);
  EXPECT_FALSE(fs::exists(path("out.bin")));
  write_bytes("in.txt", "some text");
  EXPECT_THROW(prepare_tokens(path("in.txt"), path("no/such/dir/out.bin")), InputError);
  fs::create_directory(path("taken"));  // rename onto a directory fails after the write
  EXPECT_THROW(prepare_tokens(path("in.txt"), path("taken")), InputError);
  EXPECT_FALSE(fs::exists(path("out.bin.tmp")));
  EXPECT_FALSE(fs::exists(path("taken.tmp")));
  EXPECT_TRUE(fs::is_empty(path("taken")));
}

TEST_F(TokenFile, RejectsBadHeaders) {
  write_token_file(path("good.bin"), 256, iota_tokens(100));
  const std::string good = read_bytes("good.bin");
  auto patched = [&](size_t offset, const std::string& bytes) {
    std::string b = good;
    b.replace(offset, bytes.size(), bytes);
    return b;
  };
  write_bytes("short.bin", good.substr(0, 20));
  expect_bad(file_config("short.bin"), "short.bin: truncated: file has 20 bytes");
  write_bytes("magic.bin", patched(0, "RSTOKENZ"));
  expect_bad(file_config("magic.bin"), "not a token file");
  write_bytes("version.bin", patched(8, std::string("\x02", 1)));
  expect_bad(file_config("version.bin"), "unsupported token file version 2");
  write_bytes("width.bin", patched(24, std::string("\x04", 1)));
  expect_bad(file_config("width.bin"), "bytes per token is 4 (expected 2)");
  write_bytes("cut.bin", good.substr(0, good.size() - 3));
  expect_bad(file_config("cut.bin"),
             "cut.bin: truncated: header says 100 tokens (232 bytes) but file has 229 bytes");
  write_bytes("long.bin", good + "xy");
  expect_bad(file_config("long.bin"), "header says 100 tokens (232 bytes) but file has 234");
  write_bytes("huge.bin", patched(16, std::string(8, '\xff')));
  expect_bad(file_config("huge.bin"), "truncated: header says 18446744073709551615 tokens");
  expect_bad(file_config("missing.bin"), "cannot read token file");
  expect_bad(file_config("missing.bin"), "missing.bin': No such file or directory");
}

TEST_F(TokenFile, RejectsTokensOutsideTheModel) {
  write_token_file(path("big.bin"), 512, iota_tokens(100));
  expect_bad(file_config("big.bin"), "header vocab_size 512 exceeds model.vocab_size 256");
  std::vector<uint16_t> tokens = iota_tokens(100, 100);
  tokens[57] = 300;
  write_token_file(path("bad.bin"), 256, tokens);
  expect_bad(file_config("bad.bin"), "token 57 (byte offset 146) is 300");
  write_token_file(path("few.bin"), 256, iota_tokens(17));
  expect_bad(file_config("few.bin", 8), "17 tokens are too few for model.seq_len 8");
  write_token_file(path("ranks.bin"), 256, iota_tokens(40));
  Config cfg = file_config("ranks.bin", 8);
  EXPECT_THROW(make_data_source(cfg, "train", 2, 4), InputError);  // 3 windows, 4 ranks
}

// The window each row of a batch starts with, as an index of the train part's windows.
std::vector<int32_t> windows_read(const Batch& b, int T) {
  std::vector<int32_t> w;
  for (size_t i = 0; i < b.inputs.size(); i += size_t(T)) w.push_back(b.inputs[i] / (T + 1));
  return w;
}

// Reads MICRO micro-batches of B rows on each of WORLD ranks, as a data-parallel run does,
// and returns the windows in the order of the shared sequence (micro-batch, then rank).
std::vector<int32_t> world_reads(const Config& cfg, int world, int micro, int B, int T,
                                 uint64_t from = 0) {
  std::vector<std::unique_ptr<DataSource>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(make_data_source(cfg, "train", r, world));
    ranks.back()->seek(from);
  }
  std::vector<int32_t> out;
  for (int m = 0; m < micro; ++m)
    for (auto& rank : ranks) {
      const std::vector<int32_t> w = windows_read(next(*rank, B, T), T);
      out.insert(out.end(), w.begin(), w.end());
    }
  return out;
}

TEST_F(TokenFile, RanksReadDisjointSlicesOfOneOrderAndWrap) {
  const int T = 8, world = 3, B = 2;
  write_token_file(path("t.bin"), 1024, iota_tokens(1000, 1024));  // token i == i
  Config cfg = file_config("t.bin", T, 1024);
  cfg.data.shuffle = false;
  auto rank1 = make_data_source(cfg, "train", 1, world);
  const Batch b = next(*rank1, B, T);
  for (int i = 0; i < B; ++i)
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(b.inputs[i * T + t], (B + i) * (T + 1) + t);  // slots 2 and 3 of the world
      EXPECT_EQ(b.targets[i * T + t], (B + i) * (T + 1) + t + 1);
    }
  EXPECT_EQ(rank1->position(), uint64_t(world * B));
  // 900 train tokens hold 100 windows: 17 micro-batches of 3 ranks x 2 read 102 slots,
  // every window once and then windows 0 and 1 of the next epoch.
  const std::vector<int32_t> read = world_reads(cfg, world, 17, B, T);
  ASSERT_EQ(read.size(), 102u);
  for (int j = 0; j < 102; ++j) EXPECT_EQ(read[size_t(j)], j % 100) << "slot " << j;
}

TEST_F(TokenFile, SeekToPositionContinuesTheStreamAcrossTheWrap) {
  const int T = 8;
  write_token_file(path("t.bin"), 256, iota_tokens(1000));
  const Config cfg = file_config("t.bin", T);
  auto a = make_data_source(cfg, "train", 1, 2);
  next(*a, 45, T);  // 100 windows; the world read 90 of them: the next batch wraps
  EXPECT_EQ(a->position(), 90u);
  auto b = make_data_source(cfg, "train", 1, 2);
  b->seek(a->position());
  EXPECT_EQ(next(*a, 10, T), next(*b, 10, T));
}

// A resume with another world size seeks every rank to the saved position: the windows read
// are those a run at one world size reads, none skipped or repeated.
TEST_F(TokenFile, APositionMeansTheSameAtEveryWorldSize) {
  const int T = 8;
  write_token_file(path("t.bin"), 1024, iota_tokens(1000, 1024));
  const Config cfg = file_config("t.bin", T, 1024);  // shuffled
  const std::vector<int32_t> one_rank = world_reads(cfg, 1, 36, 4, T);
  std::vector<int32_t> switched = world_reads(cfg, 2, 5, 4, T);        // 40 slots
  const std::vector<int32_t> rest = world_reads(cfg, 4, 6, 4, T, 40);  // 96 more
  switched.insert(switched.end(), rest.begin(), rest.end());
  ASSERT_EQ(switched.size(), 136u);
  EXPECT_EQ(switched, std::vector<int32_t>(one_rank.begin(), one_rank.begin() + 136));
}

// With shuffling each epoch reads every window once, in an order that changes with the epoch
// and the seed and is shared by the ranks; the same seed gives the same order.
TEST_F(TokenFile, ShuffledEpochsArePermutationsOfTheWindows) {
  const int T = 8, world = 2;
  write_token_file(path("t.bin"), 1024, iota_tokens(1000, 1024));  // token i == i
  Config cfg = file_config("t.bin", T, 1024);
  Config ordered = cfg;
  ordered.data.shuffle = false;
  const std::vector<int32_t> in_order = world_reads(ordered, world, 50, 1, T),
                             two = world_reads(cfg, world, 100, 1, T);
  const std::vector<int32_t> e0(two.begin(), two.begin() + 100), e1(two.begin() + 100, two.end());
  EXPECT_NE(e0, in_order);
  EXPECT_NE(e0, e1) << "epochs must differ";
  for (const auto& epoch : {e0, e1}) {
    std::vector<int32_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, in_order) << "an epoch is a permutation of the windows";
  }
  EXPECT_EQ(two, world_reads(cfg, world, 100, 1, T)) << "same seed, same order";
  Config other = cfg;
  other.run.seed += 1;
  EXPECT_NE(world_reads(other, world, 50, 1, T), e0);
  // The val stream is never shuffled.
  EXPECT_EQ(next(*make_data_source(cfg, "val", 0, world), 3, T),
            next(*make_data_source(ordered, "val", 0, world), 3, T));
}

TEST_F(TokenFile, ValIsTheHeldOutTailOrItsOwnFile) {
  const int T = 8;
  write_token_file(path("t.bin"), 256, iota_tokens(1000));
  Config cfg = file_config("t.bin", T);
  auto val0 = make_data_source(cfg, "val", 0, 2);
  const Batch first = next(*val0, 11, T);  // 100 val tokens: 11 windows of 9
  EXPECT_EQ(first.inputs[0], 900 % 256);
  EXPECT_EQ(first.inputs[10 * T], (900 + 90) % 256);
  EXPECT_EQ(next(*val0, 1, T).inputs[0], 900 % 256);  // wrapped
  EXPECT_EQ(first, next(*make_data_source(cfg, "val", 1, 2), 11, T));

  std::vector<uint16_t> val_tokens(50, 7);
  write_token_file(path("v.bin"), 256, val_tokens);
  cfg.data.val_path = path("v.bin");
  const Batch own = next(*make_data_source(cfg, "val", 1, 2), 2, T);
  for (int32_t token : own.inputs) EXPECT_EQ(token, 7);
  // With a separate val file the whole train file is train data.
  cfg.data.shuffle = false;
  auto train = make_data_source(cfg, "train", 0, 1);
  next(*train, 1000 / (T + 1) - 1, T);
  EXPECT_EQ(next(*train, 1, T).inputs[0], (1000 / (T + 1) - 1) * (T + 1) % 256);
}

// A glob of shards is one stream: it gives the batches, the order in every epoch, the val
// tail and the positions that one file holding the shards' concatenation gives, windows that
// straddle two or three shards included.
TEST_F(TokenFile, ShardsReadAsTheFileOfTheirConcatenation) {
  const int T = 8;
  const std::vector<uint16_t> tokens = iota_tokens(1000, 1024);  // token i == i
  write_token_file(path("one.bin"), 1024, tokens);
  size_t at = 0, k = 0;
  for (size_t n : {300, 1, 450, 249}) {  // window 33, [297, 306), spans three shards
    write_llmc_shard(path("s_" + std::to_string(k++) + ".bin"),
                     {tokens.begin() + long(at), tokens.begin() + long(at + n)});
    at += n;
  }
  for (bool shuffle : {false, true}) {
    Config one = file_config("one.bin", T, 1024), shards = file_config("s_*.bin", T, 1024);
    one.data.shuffle = shards.data.shuffle = shuffle;
    // 900 train tokens hold 100 windows: 30 micro-batches of 2 ranks x 2 rows pass an epoch.
    EXPECT_EQ(world_reads(shards, 2, 30, 2, T), world_reads(one, 2, 30, 2, T)) << shuffle;
    EXPECT_EQ(world_reads(shards, 3, 5, 2, T, 77), world_reads(one, 3, 5, 2, T, 77)) << shuffle;
    auto a = make_data_source(shards, "train", 1, 2), b = make_data_source(one, "train", 1, 2);
    for (int m = 0; m < 30; ++m) ASSERT_EQ(next(*a, 2, T), next(*b, 2, T)) << m;
    EXPECT_EQ(next(*make_data_source(shards, "val", 1, 2), 11, T),
              next(*make_data_source(one, "val", 1, 2), 11, T));
    EXPECT_NE(a->describe().find("4 files matching '" + path("s_*.bin") +
                                 "' (llm.c shards): 1000 tokens; train part [0, 900)"),
              std::string::npos)
        << a->describe();
  }
  Config ordered = file_config("s_*.bin", T, 1024);
  ordered.data.shuffle = false;
  auto source = make_data_source(ordered, "train", 0, 1);
  next(*source, 33, T);
  const Batch straddling = next(*source, 1, T);
  for (int t = 0; t < T; ++t) EXPECT_EQ(straddling.inputs[size_t(t)], 297 + t);
}

TEST_F(TokenFile, AValFileThatDataPathAlsoNamesIsRefused) {
  write_llmc_shard(path("d_train_000001.bin"), iota_tokens(500));
  write_llmc_shard(path("d_val_000000.bin"), iota_tokens(100));
  Config cfg = file_config("d_*.bin");
  cfg.data.val_path = path("d_val_000000.bin");
  expect_bad(cfg, "data.val_path's file '" + path("d_val_000000.bin") +
                      "' is also one of data.path's ('" + path("d_*.bin") +
                      "'): the run would train on its val data");
  cfg.data.path = path("d_train_*.bin");
  cfg.data.val_path = path("d_val_*.bin");
  EXPECT_NO_THROW(make_data_source(cfg, "train", 0, 1));
  EXPECT_NO_THROW(make_data_source(cfg, "val", 0, 1));
}

TEST(Data, FileSourceWithoutPathIsAnInputError) {
  Config cfg = synthetic_config();
  cfg.data.source = DataSourceKind::file;
  EXPECT_THROW(make_data_source(cfg, "train", 0, 1), InputError);  // no data.path
  EXPECT_TRUE(std::isnan(data_info(cfg).entropy_rate));
  EXPECT_TRUE(std::isnan(data_info(cfg).window_floor));
}

TEST(Data, DescribeIsOneLine) {
  auto source = make_data_source(synthetic_config(), "train", 1, 2);
  const std::string line = source->describe();
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("synthetic"), std::string::npos) << line;
}

}  // namespace
}  // namespace ringstep
