#include "train/token_file.h"

#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "core/little_endian.h"
#include "train/data.h"

namespace ringstep {
namespace {

constexpr char kMagic[8] = {'R', 'S', 'T', 'O', 'K', 'E', 'N', 'S'};

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
  write_new_file(path, bytes);
}

bool has_token_file_magic(const unsigned char* bytes, size_t size) {
  return size >= sizeof kMagic && std::memcmp(bytes, kMagic, sizeof kMagic) == 0;
}

TokenLayout parse_token_file_header(const std::string& path, const unsigned char* bytes,
                                    size_t size, int model_vocab) {
  check_header_fits(path, size, kTokenHeaderBytes, "a ringstep token file");
  const uint64_t version = get_le(bytes + 8, 4), vocab = get_le(bytes + 12, 4);
  const uint64_t count = get_le(bytes + 16, 8), token_bytes = get_le(bytes + 24, 4);
  if (version != kTokenFileVersion)
    throw InputError(format_message("%s: unsupported token file version %llu (expected %u)",
                                    path.c_str(), static_cast<unsigned long long>(version),
                                    kTokenFileVersion));
  if (token_bytes != kTokenBytes)
    throw InputError(format_message("%s: bytes per token is %llu (expected %zu)", path.c_str(),
                                    static_cast<unsigned long long>(token_bytes), kTokenBytes));
  check_token_count(path, size, kTokenHeaderBytes, count);
  if (vocab > static_cast<uint64_t>(model_vocab))
    throw InputError(format_message("%s: header vocab_size %llu exceeds model.vocab_size %d",
                                    path.c_str(), static_cast<unsigned long long>(vocab),
                                    model_vocab));
  return {kTokenHeaderBytes, count, vocab,
          format_message("the header's vocab_size %llu (model.vocab_size %d)",
                         static_cast<unsigned long long>(vocab), model_vocab)};
}

void prepare_tokens(const std::string& input_text_path, const std::string& output_path) {
  if (output_path.empty()) throw InputError("prepare: --output is empty, expected a file name");
  const std::string text = read_regular_file(input_text_path, kNoSizeLimit, "prepare input");
  if (text.empty()) throw InputError(input_text_path + ": empty input, nothing to prepare");
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  write_token_file(output_path, 256, tokens);
}

}  // namespace ringstep
