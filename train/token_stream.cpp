#include "train/token_stream.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>

#include "core/error.h"
#include "core/little_endian.h"
#include "train/llmc_shard.h"
#include "train/token_file.h"

namespace ringstep {
namespace {

const char* format_noun(DataFormat format) {
  return format == DataFormat::llmc ? "llm.c shard" : "ringstep token file";
}
std::string with_article(DataFormat format) {
  return (format == DataFormat::llmc ? "an " : "a ") + std::string(format_noun(format));
}

bool has_magic(DataFormat format, const unsigned char* bytes, size_t size) {
  return format == DataFormat::llmc ? llmc_magic(bytes, size) == kLlmcMagic
                                    : has_token_file_magic(bytes, size);
}

// What BYTES[0, SIZE) is by its magic, for messages; "" when unknown.
std::string identify(const unsigned char* bytes, size_t size) {
  if (has_token_file_magic(bytes, size)) return "a ringstep token file";
  switch (llmc_magic(bytes, size)) {
    case kLlmcMagic:
      return "an llm.c shard";
    case kLlmcLlama3Magic:
      return "an llm.c Llama 3 shard, whose uint32 tokens ringstep does not read (it reads "
             "llm.c's GPT-2 shards, uint16 tokens)";
    case kLlmcEvalMagic:
      return "an llm.c eval file (HellaSwag or MMLU examples), not training tokens";
    default:
      return "";
  }
}

// The format of PATH by its magic (data.format auto); throws InputError when it has neither.
DataFormat sniff(const std::string& path, const unsigned char* bytes, size_t size) {
  if (has_token_file_magic(bytes, size)) return DataFormat::ringstep;
  if (llmc_magic(bytes, size) == kLlmcMagic) return DataFormat::llmc;
  if (size == 0) throw InputError(path + ": empty file, not a token file");
  if (const std::string what = identify(bytes, size); !what.empty())
    throw InputError(path + ": " + what);
  throw InputError(format_message(
      "%s: not a token file: it starts with neither ringstep's magic \"RSTOKENS\" nor llm.c's "
      "%d (write one with `ringstep prepare` or llm.c's dev/data scripts)",
      path.c_str(), kLlmcMagic));
}

// PATH's magic is not FORMAT's, which data.format asks for.
[[noreturn]] void refuse_format(const std::string& path, DataFormat format,
                                const unsigned char* bytes, size_t size) {
  std::string msg =
      path + ": not " + with_article(format) + " (data.format is " + name(format) + "; ";
  msg += format == DataFormat::llmc
             ? format_message("its first int32 is %d, not %d)", llmc_magic(bytes, size), kLlmcMagic)
             : "its magic is not \"RSTOKENS\"; write one with `ringstep prepare`)";
  const std::string what = identify(bytes, size);
  if (!what.empty()) msg += ": it is " + what;
  for (DataFormat other : {DataFormat::ringstep, DataFormat::llmc})
    if (other != format && has_magic(other, bytes, size))
      msg += std::string("; set data.format to ") + name(other) + " or auto";
  throw InputError(msg);
}

// Every token of SHARD is below its layout's vocab. Scans blocks for their maximum (which
// vectorizes) and looks into a block only when it fails: a fineweb shard is 10^8 tokens.
void check_tokens(const TokenShard& shard) {
  const TokenLayout& layout = shard.layout;
  const unsigned char* p = shard.file.data() + layout.header_bytes;
  constexpr uint64_t kBlock = 1 << 16;
  for (uint64_t begin = 0; begin < layout.count; begin += kBlock) {
    const uint64_t end = std::min(layout.count, begin + kBlock);
    unsigned top = 0;
    for (uint64_t i = begin; i < end; ++i)
      top = std::max(top, unsigned(p[2 * i]) | unsigned(p[2 * i + 1]) << 8);
    if (top < layout.vocab) continue;
    for (uint64_t i = begin; i < end; ++i) {
      const uint16_t token = shard.token(i);
      if (token >= layout.vocab)
        throw InputError(
            format_message("%s: token %llu (byte offset %llu) is %u, not below %s",
                           shard.path.c_str(), static_cast<unsigned long long>(i),
                           static_cast<unsigned long long>(layout.header_bytes + kTokenBytes * i),
                           token, layout.vocab_text.c_str()));
    }
  }
}

TokenShard open_shard(const std::string& path, DataFormat format, int model_vocab) {
  TokenShard shard{path, format, {}, MappedFile(path, "token file")};
  const unsigned char* bytes = shard.file.data();
  const size_t size = shard.file.size();
  if (format == DataFormat::auto_) {
    shard.format = sniff(path, bytes, size);
  } else if (!has_magic(format, bytes, size)) {
    // A file too short for the header is "truncated", unless it is recognisably another kind.
    if (identify(bytes, size).empty())
      check_header_fits(path, size,
                        format == DataFormat::llmc ? kLlmcHeaderBytes : kTokenHeaderBytes,
                        with_article(format).c_str());
    refuse_format(path, format, bytes, size);
  }
  shard.layout = shard.format == DataFormat::llmc
                     ? parse_llmc_header(path, bytes, size, model_vocab)
                     : parse_token_file_header(path, bytes, size, model_vocab);
  check_tokens(shard);
  return shard;
}

}  // namespace

void check_header_fits(const std::string& path, size_t size, size_t header_bytes,
                       const char* format) {
  if (size < header_bytes)
    throw InputError(
        format_message("%s: truncated: file has %zu bytes, less than the %zu-byte "
                       "header of %s",
                       path.c_str(), size, header_bytes, format));
}

void check_token_count(const std::string& path, size_t size, size_t header_bytes, uint64_t count) {
  const uint64_t payload = size - header_bytes;
  if (count > payload / kTokenBytes || payload != count * kTokenBytes) {
    // Printed in long double so that an absurd count cannot overflow the expected size.
    const long double expected = header_bytes + static_cast<long double>(count) * kTokenBytes;
    throw InputError(
        format_message("%s: %s: header says %llu tokens (%.0Lf bytes) but file has %zu bytes",
                       path.c_str(), expected > size ? "truncated" : "trailing bytes",
                       static_cast<unsigned long long>(count), expected, size));
  }
  if (count == 0) throw InputError(path + ": holds no tokens (the header's token count is 0)");
}

void write_new_file(const std::string& path, const std::vector<unsigned char>& bytes) {
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

std::vector<std::string> expand_data_path(const std::string& key, const std::string& path) {
  if (path.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw InputError(key + " '" + path +
                       "' is a directory; name a token file, or a glob of files such as '" + path +
                       "/*_train_*.bin' (quoted in the shell)");
    return {path};
  }
  glob_t g{};
  const int status = ::glob(path.c_str(), GLOB_NOSORT, nullptr, &g);
  std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + (status == 0 ? g.gl_pathc : 0));
  globfree(&g);
  if (status == GLOB_NOSPACE) throw std::bad_alloc();
  if (status == GLOB_NOMATCH || paths.empty())
    throw InputError(key + " '" + path + "': no file matches the pattern");
  if (status != 0) throw InputError(key + " '" + path + "': cannot read the directories it names");
  std::sort(paths.begin(), paths.end());  // bytewise: char_traits<char> compares as memcmp
  return paths;
}

uint16_t TokenShard::token(uint64_t i) const {
  return static_cast<uint16_t>(get_le(file.data() + layout.header_bytes + kTokenBytes * i, 2));
}

TokenStream::TokenStream(std::string path, std::vector<TokenShard> shards)
    : path_(std::move(path)), shards_(std::move(shards)) {
  for (TokenShard& shard : shards_) {
    shard.first = size_;
    size_ += shard.layout.count;
  }
}

void TokenStream::read(uint64_t begin, size_t n, int32_t* out) const {
  if (begin > size_ || n > size_ - begin)
    throw std::out_of_range(format_message("TokenStream::read: [%llu, +%zu) past %llu tokens",
                                           static_cast<unsigned long long>(begin), n,
                                           static_cast<unsigned long long>(size_)));
  // The last shard that starts at or before BEGIN.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), begin,
                             [](uint64_t i, const TokenShard& s) { return i < s.first; });
  for (--it; n > 0; ++it) {
    const uint64_t from = begin - it->first;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, it->layout.count - from));
    for (size_t k = 0; k < take; ++k) out[k] = it->token(from + k);
    out += take;
    begin += take;
    n -= take;
  }
}

std::string TokenStream::describe() const {
  const auto count = static_cast<unsigned long long>(size_);
  if (shards_.size() == 1 && shards_[0].path == path_)
    return format_message("%s %s: %llu tokens", format_noun(shards_[0].format), path_.c_str(),
                          count);
  const size_t n = shards_.size();
  const auto llmc = size_t(std::count_if(shards_.begin(), shards_.end(), [](const TokenShard& s) {
    return s.format == DataFormat::llmc;
  }));
  const std::string plural = n == 1 ? "" : "s";
  const std::string kinds =
      llmc == 0   ? format_noun(DataFormat::ringstep) + plural
      : llmc == n ? format_noun(DataFormat::llmc) + plural
                  : format_message("llm.c shards: %zu, ringstep token files: %zu", llmc, n - llmc);
  return format_message("%zu file%s matching '%s' (%s): %llu tokens", n, plural.c_str(),
                        path_.c_str(), kinds.c_str(), count);
}

TokenStream open_token_stream(const std::string& key, const std::string& path, DataFormat format,
                              int model_vocab) {
  std::vector<TokenShard> shards;
  for (const std::string& file : expand_data_path(key, path))
    shards.push_back(open_shard(file, format, model_vocab));
  return TokenStream(path, std::move(shards));
}

}  // namespace ringstep
