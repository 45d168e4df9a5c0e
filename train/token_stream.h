// Token files as training reads them. data.path names one file or a glob of files, taken in
// bytewise sorted order; each is mapped read-only (core/files.h) and read as a ringstep token
// file (train/token_file.h) or an llm.c shard (train/llmc_shard.h), told apart by its magic
// or fixed by data.format. The files are one stream of tokens, as if concatenated in that
// order. Opening checks every header field, every size and every token; each failure is an
// InputError naming the file and what is wrong. Immutable once open; safe to read from
// several threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/files.h"

namespace ringstep {

constexpr size_t kTokenBytes = 2;  // both formats store a token as a little-endian uint16

// Where a token file's tokens lie: COUNT little-endian uint16 from byte HEADER_BYTES to the
// end of the file, each below VOCAB. VOCAB_TEXT says where that bound comes from, for
// messages ("model.vocab_size 50257").
struct TokenLayout {
  size_t header_bytes = 0;
  uint64_t count = 0;
  uint64_t vocab = 0;
  std::string vocab_text;
};

// The checks of a header that both formats share, with one wording. Each throws InputError
// naming PATH. SIZE: the file's bytes; FORMAT: "a ringstep token file", "an llm.c shard".
void check_header_fits(const std::string& path, size_t size, size_t header_bytes,
                       const char* format);
// The file holds exactly COUNT 2-byte tokens after the header ("truncated" or "trailing
// bytes" otherwise), and COUNT > 0.
void check_token_count(const std::string& path, size_t size, size_t header_bytes, uint64_t count);

// Writes BYTES to PATH.tmp and renames it to PATH, so that a reader never sees half a file;
// on failure removes PATH.tmp and throws InputError. The token file writers use it.
void write_new_file(const std::string& path, const std::vector<unsigned char>& bytes);

// The files PATH names: PATH itself or, when it holds a glob metacharacter (*, ? or [), the
// paths that match it (glob(3); a metacharacter in a file name is escaped with \), sorted
// bytewise. Throws InputError naming KEY ("data.path") when a pattern matches nothing or a
// plain PATH is a directory.
std::vector<std::string> expand_data_path(const std::string& key, const std::string& path);

// One mapped token file.
struct TokenShard {
  std::string path;
  DataFormat format = DataFormat::auto_;  // as read: ringstep or llmc
  TokenLayout layout;
  MappedFile file;
  uint64_t first = 0;  // the stream index of its first token

  uint16_t token(uint64_t i) const;  // its I-th token, I < layout.count
};

class TokenStream {
 public:
  TokenStream(std::string path, std::vector<TokenShard> shards);

  uint64_t size() const { return size_; }
  // Tokens [BEGIN, BEGIN + N) of the stream into OUT, across file boundaries.
  // Throws std::out_of_range past the end.
  void read(uint64_t begin, size_t n, int32_t* out) const;
  const std::vector<TokenShard>& shards() const { return shards_; }
  const std::string& path() const { return path_; }  // as given: a file or a pattern
  // "llm.c shard X: N tokens", "3 files matching 'P' (2 llm.c shards, 1 ringstep token
  // file): N tokens".
  std::string describe() const;

 private:
  std::string path_;
  std::vector<TokenShard> shards_;
  uint64_t size_ = 0;
};

// Opens the files PATH names (expand_data_path; KEY names the setting) as FORMAT, or each by
// its magic when FORMAT is auto_. Every token must be below MODEL_VOCAB (and a ringstep
// file's below its header's vocab_size). Throws InputError on the first bad file.
TokenStream open_token_stream(const std::string& key, const std::string& path, DataFormat format,
                              int model_vocab);

}  // namespace ringstep
