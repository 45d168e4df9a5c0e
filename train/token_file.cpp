#include "train/token_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "core/error.h"
#include "core/files.h"
#include "core/little_endian.h"
#include "train/synthetic.h"

namespace ringstep {
namespace {

constexpr char kMagic[8] = {'R', 'S', 'T', 'O', 'K', 'E', 'N', 'S'};

std::string fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

}  // namespace

void write_token_file(const std::string& path, uint32_t vocab_size,
                      const std::vector<uint16_t>& tokens) {
  std::vector<unsigned char> bytes(kTokenHeaderBytes + kTokenBytes * tokens.size());
  std::memcpy(bytes.data(), kMagic, sizeof kMagic);
  put_le(&bytes[8], kTokenFileVersion, 4);
  put_le(&bytes[12], vocab_size, 4);
  put_le(&bytes[16], tokens.size(), 8);
  put_le(&bytes[24], kTokenBytes, 4);
  put_le(&bytes[28], 0, 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    put_le(&bytes[kTokenHeaderBytes + kTokenBytes * i], tokens[i], kTokenBytes);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InputError(path + ": cannot write: " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot write: " + std::strerror(written ? errno : write_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot write: " + std::strerror(rename_errno));
  }
}

LoadedTokens read_token_file(const std::string& path, int model_vocab) {
  // The header's count bounds the size: no limit beyond the file being regular.
  const std::string bytes = read_regular_file(path, kNoSizeLimit, "token file");
  const size_t size = bytes.size();
  if (size < kTokenHeaderBytes)
    throw InputError(fmt("%s: truncated: file has %zu bytes, less than the %zu-byte header",
                         path.c_str(), size, kTokenHeaderBytes));
  const auto* h = reinterpret_cast<const unsigned char*>(bytes.data());
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0)
    throw InputError(path +
                     ": not a token file (magic is not \"RSTOKENS\"; write one with "
                     "`ringstep prepare`)");
  const uint64_t version = get_le(h + 8, 4), vocab = get_le(h + 12, 4);
  const uint64_t count = get_le(h + 16, 8), token_bytes = get_le(h + 24, 4);
  if (version != kTokenFileVersion)
    throw InputError(fmt("%s: unsupported token file version %llu (expected %u)", path.c_str(),
                         static_cast<unsigned long long>(version), kTokenFileVersion));
  if (token_bytes != kTokenBytes)
    throw InputError(fmt("%s: bytes per token is %llu (expected %u)", path.c_str(),
                         static_cast<unsigned long long>(token_bytes), kTokenBytes));
  const uint64_t payload = size - kTokenHeaderBytes;
  if (count > payload / kTokenBytes || payload != count * kTokenBytes) {
    // Printed in long double so that an absurd count cannot overflow the expected size.
    const long double expected = kTokenHeaderBytes + static_cast<long double>(count) * kTokenBytes;
    throw InputError(fmt("%s: %s: header says %llu tokens (%.0Lf bytes) but file has %zu bytes",
                         path.c_str(), expected > size ? "truncated" : "trailing bytes",
                         static_cast<unsigned long long>(count), expected, size));
  }
  if (vocab > static_cast<uint64_t>(model_vocab))
    throw InputError(fmt("%s: header vocab_size %llu exceeds model.vocab_size %d", path.c_str(),
                         static_cast<unsigned long long>(vocab), model_vocab));
  LoadedTokens file;
  file.vocab_size = static_cast<uint32_t>(vocab);
  file.tokens.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const size_t offset = kTokenHeaderBytes + kTokenBytes * i;
    file.tokens[i] = static_cast<uint16_t>(get_le(h + offset, kTokenBytes));
    if (file.tokens[i] >= vocab)
      throw InputError(
          fmt("%s: token %zu (byte offset %zu) is %u, not below the header's "
              "vocab_size %llu (model.vocab_size %d)",
              path.c_str(), i, offset, file.tokens[i], static_cast<unsigned long long>(vocab),
              model_vocab));
  }
  return file;
}

void prepare_tokens(const std::string& input_text_path, const std::string& output_path) {
  if (output_path.empty()) throw InputError("prepare: --output is empty, expected a file name");
  const std::string text = read_regular_file(input_text_path, kNoSizeLimit, "prepare input");
  if (text.empty()) throw InputError(input_text_path + ": empty input, nothing to prepare");
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  write_token_file(output_path, 256, tokens);
}

namespace {

// Window w of a part covers tokens [begin + w*(T+1), begin + (w+1)*(T+1)). The training
// windows form one sequence per epoch that every rank shares: slot j holds window
// order_e(j mod count), where e = j / count is the epoch and order_e is the identity, or
// with shuffling a permutation of [0, count) that depends only on (seed, e). Each
// next_batch(B) is one micro-batch of the whole world: rank r reads slots
// [cursor + r*B, cursor + (r+1)*B), and every rank's cursor moves on by world*B. The cursor
// (slots the world has consumed) is the position: the same on every rank, and valid at any
// world size, so a resume with another world size neither skips nor repeats a window. Any
// position can be sought without replaying the ones before.
class FileSource final : public DataSource {
 public:
  FileSource(std::vector<uint16_t> tokens, size_t begin, int seq_len, int rank, int world,
             size_t count, std::optional<uint64_t> shuffle_seed, std::string description)
      : tokens_(std::move(tokens)),
        begin_(begin),
        seq_len_(seq_len),
        rank_(size_t(rank)),
        world_(size_t(world)),
        count_(count),
        shuffle_seed_(shuffle_seed),
        description_(std::move(description)) {}

  void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
    if (T != seq_len_)
      throw std::invalid_argument(fmt("FileSource: T=%d but seq_len is %d", T, seq_len_));
    const size_t window = static_cast<size_t>(T) + 1;
    const uint64_t mine = cursor_ + rank_ * size_t(B);
    for (int i = 0; i < B; ++i) {
      const uint16_t* src = &tokens_[begin_ + window_of(mine + size_t(i)) * window];
      std::copy(src, src + T, inputs + static_cast<size_t>(i) * T);
      std::copy(src + 1, src + T + 1, targets + static_cast<size_t>(i) * T);
    }
    cursor_ += world_ * size_t(B);
  }

  void reset() override { cursor_ = 0; }
  uint64_t position() const override { return cursor_; }
  void seek(uint64_t position) override { cursor_ = position; }
  std::string describe() const override { return description_; }

 private:
  // The window in slot J.
  size_t window_of(uint64_t j) {
    if (!shuffle_seed_) return j % count_;
    const uint64_t epoch = j / count_;
    if (order_.empty() || epoch != order_epoch_) {
      // Fisher-Yates with a generator of its own per (seed, epoch).
      order_.resize(count_);
      for (size_t i = 0; i < count_; ++i) order_[i] = i;
      SplitMix64 rng(*shuffle_seed_, epoch);
      for (size_t i = count_ - 1; i > 0; --i) std::swap(order_[i], order_[rng.next() % (i + 1)]);
      order_epoch_ = epoch;
    }
    return order_[j % count_];
  }

  std::vector<uint16_t> tokens_;
  size_t begin_;
  int seq_len_;
  size_t rank_, world_, count_;
  std::optional<uint64_t> shuffle_seed_;  // none: file order
  uint64_t cursor_ = 0;
  std::vector<size_t> order_;  // the permutation of epoch order_epoch_
  uint64_t order_epoch_ = 0;
  std::string description_;
};

}  // namespace

std::unique_ptr<DataSource> make_file_source(const Config& cfg, const std::string& split, int rank,
                                             int world) {
  if (cfg.data.path.empty()) throw InputError("data.path: required when data.source is file");
  const bool val = split == "val";
  const bool separate_val = !cfg.data.val_path.empty();
  const std::string& path = val && separate_val ? cfg.data.val_path : cfg.data.path;
  const int T = cfg.model.seq_len;
  const size_t window = static_cast<size_t>(T) + 1;

  LoadedTokens file = read_token_file(path, cfg.model.vocab_size);
  const size_t n = file.tokens.size();
  if (n < 2 * window)
    throw InputError(
        fmt("%s: %zu tokens are too few for model.seq_len %d: need at least %zu "
            "(two windows of seq_len + 1)",
            path.c_str(), n, T, 2 * window));
  const size_t val_tokens = separate_val ? 0 : std::max(n / 10, window);
  const size_t begin = val && !separate_val ? n - val_tokens : 0;
  const size_t length = separate_val ? n : val ? val_tokens : n - val_tokens;
  const size_t windows = length / window;
  if (!val && windows < size_t(world))
    throw InputError(
        fmt("%s: the train part holds %zu windows of seq_len + 1 = %zu tokens, "
            "fewer than the %d ranks",
            path.c_str(), windows, window, world));
  const std::string description =
      val ? fmt("token file %s: %zu tokens; val part [%zu, %zu): %zu windows of %zu tokens, "
                "read in order by every rank",
                path.c_str(), n, begin, begin + length, windows, window)
          : fmt("token file %s: %zu tokens; train part [%zu, %zu): %zu windows of %zu tokens, "
                "one order shared by the %d ranks (rank %d reads its slice of each micro-batch)",
                path.c_str(), n, begin, begin + length, windows, window, world, rank);
  // One seed for every rank: the ranks share one order and read disjoint slots of it. The
  // val stream is always read in order.
  std::optional<uint64_t> shuffle;
  if (!val && cfg.data.shuffle) shuffle = cfg.run.seed;
  return std::make_unique<FileSource>(std::move(file.tokens), begin, T, val ? 0 : rank,
                                      val ? 1 : world, windows, shuffle,
                                      description + (shuffle ? ", shuffled each epoch" : ""));
}

}  // namespace ringstep
