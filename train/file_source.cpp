#include "train/file_source.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "train/synthetic.h"
#include "train/token_stream.h"

namespace ringstep {
namespace {

namespace fs = std::filesystem;

// Window w of a part covers stream tokens [begin + w*(T+1), begin + (w+1)*(T+1)). The
// training windows form one sequence per epoch that every rank shares: slot j holds window
// order_e(j mod count), where e = j / count is the epoch and order_e is the identity, or
// with shuffling a permutation of [0, count) that depends only on (seed, e). Each
// next_batch(B) is one micro-batch of the whole world: rank r reads slots
// [cursor + r*B, cursor + (r+1)*B), and every rank's cursor moves on by world*B. The cursor
// (slots the world has consumed) is the position: the same on every rank, and valid at any
// world size, so a resume with another world size neither skips nor repeats a window. Any
// position can be sought without replaying the ones before.
class FileSource final : public DataSource {
 public:
  FileSource(TokenStream tokens, uint64_t begin, int seq_len, int rank, int world, size_t count,
             std::optional<uint64_t> shuffle_seed, std::string description)
      : tokens_(std::move(tokens)),
        begin_(begin),
        seq_len_(seq_len),
        rank_(size_t(rank)),
        world_(size_t(world)),
        count_(count),
        shuffle_seed_(shuffle_seed),
        description_(std::move(description)),
        window_(size_t(seq_len) + 1) {}

  void next_batch(int32_t* inputs, int32_t* targets, int B, int T) override {
    if (T != seq_len_)
      throw std::invalid_argument(
          format_message("FileSource: T=%d but seq_len is %d", T, seq_len_));
    const uint64_t mine = cursor_ + rank_ * size_t(B);
    for (int i = 0; i < B; ++i) {
      tokens_.read(begin_ + window_of(mine + size_t(i)) * window_.size(), window_.size(),
                   window_.data());
      std::copy(window_.begin(), window_.end() - 1, inputs + static_cast<size_t>(i) * T);
      std::copy(window_.begin() + 1, window_.end(), targets + static_cast<size_t>(i) * T);
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

  TokenStream tokens_;
  uint64_t begin_;
  int seq_len_;
  size_t rank_, world_, count_;
  std::optional<uint64_t> shuffle_seed_;  // none: file order
  uint64_t cursor_ = 0;
  std::vector<size_t> order_;  // the permutation of epoch order_epoch_
  uint64_t order_epoch_ = 0;
  std::string description_;
  std::vector<int32_t> window_;  // the window being copied: seq_len + 1 tokens
};

// Throws InputError when a file of data.val_path is also one of data.path's: the run would
// train on its val data (a glob such as 'dir/*.bin' over llm.c's shards matches both).
void check_val_is_held_out(const Config& cfg) {
  const std::vector<std::string> train = expand_data_path("data.path", cfg.data.path);
  for (const std::string& val : expand_data_path("data.val_path", cfg.data.val_path)) {
    for (const std::string& file : train) {
      std::error_code ec;
      if (fs::equivalent(val, file, ec))
        throw InputError("data.val_path's file '" + val + "' is also one of data.path's ('" +
                         cfg.data.path +
                         "'): the run would train on its val data; narrow data.path (for "
                         "llm.c's shards, a glob of '*_train_*.bin')");
    }
  }
}

}  // namespace

std::unique_ptr<DataSource> make_file_source(const Config& cfg, const std::string& split, int rank,
                                             int world) {
  if (cfg.data.path.empty()) throw InputError("data.path: required when data.source is file");
  const bool val = split == "val";
  const bool separate_val = !cfg.data.val_path.empty();
  const bool from_val_path = val && separate_val;
  const int T = cfg.model.seq_len;
  const uint64_t window = static_cast<uint64_t>(T) + 1;

  TokenStream tokens = open_token_stream(from_val_path ? "data.val_path" : "data.path",
                                         from_val_path ? cfg.data.val_path : cfg.data.path,
                                         cfg.data.format, cfg.model.vocab_size);
  if (separate_val && !val) check_val_is_held_out(cfg);
  const std::string& path = tokens.path();
  const uint64_t n = tokens.size();
  const auto ull = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (n < 2 * window)
    throw InputError(
        format_message("%s: %llu tokens are too few for model.seq_len %d: need at least %llu "
                       "(two windows of seq_len + 1)",
                       path.c_str(), ull(n), T, ull(2 * window)));
  const uint64_t val_tokens = separate_val ? 0 : std::max(n / 10, window);
  const uint64_t begin = val && !separate_val ? n - val_tokens : 0;
  const uint64_t length = separate_val ? n : val ? val_tokens : n - val_tokens;
  const auto windows = static_cast<size_t>(length / window);
  if (!val && windows < size_t(world))
    throw InputError(
        format_message("%s: the train part holds %zu windows of seq_len + 1 = %llu tokens, "
                       "fewer than the %d ranks",
                       path.c_str(), windows, ull(window), world));
  const std::string description =
      tokens.describe() +
      (val ? format_message("; val part [%llu, %llu): %zu windows of %llu tokens, read in order "
                            "by every rank",
                            ull(begin), ull(begin + length), windows, ull(window))
           : format_message("; train part [%llu, %llu): %zu windows of %llu tokens, one order "
                            "shared by the %d ranks (rank %d reads its slice of each micro-batch)",
                            ull(begin), ull(begin + length), windows, ull(window), world, rank));
  // One seed for every rank: the ranks share one order and read disjoint slots of it. The
  // val stream is always read in order.
  std::optional<uint64_t> shuffle;
  if (!val && cfg.data.shuffle) shuffle = cfg.run.seed;
  return std::make_unique<FileSource>(std::move(tokens), begin, T, val ? 0 : rank, val ? 1 : world,
                                      windows, shuffle,
                                      description + (shuffle ? ", shuffled each epoch" : ""));
}

}  // namespace ringstep
