#include "train/llmc_shard.h"

#include "core/error.h"
#include "core/little_endian.h"

namespace ringstep {

void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::vector<unsigned char> bytes(kLlmcHeaderBytes + 2 * tokens.size());  // header zeroed
  put_le(&bytes[0], uint32_t(kLlmcMagic), 4);
  put_le(&bytes[4], uint32_t(kLlmcVersion), 4);
  put_le(&bytes[8], tokens.size(), 4);
  for (size_t i = 0; i < tokens.size(); ++i) put_le(&bytes[kLlmcHeaderBytes + 2 * i], tokens[i], 2);
  write_new_file(path, bytes);
}

int32_t llmc_magic(const unsigned char* bytes, size_t size) {
  return size < 4 ? 0 : static_cast<int32_t>(get_le(bytes, 4));
}

TokenLayout parse_llmc_header(const std::string& path, const unsigned char* bytes, size_t size,
                              int model_vocab) {
  check_header_fits(path, size, kLlmcHeaderBytes, "an llm.c shard");
  const auto version = static_cast<int32_t>(get_le(bytes + 4, 4));
  const auto count = static_cast<int32_t>(get_le(bytes + 8, 4));
  if (version != kLlmcVersion)
    throw InputError(format_message("%s: unsupported llm.c shard version %d (expected %d)",
                                    path.c_str(), version, kLlmcVersion));
  if (count < 0)
    throw InputError(
        format_message("%s: the header's token count is %d, not a count", path.c_str(), count));
  check_token_count(path, size, kLlmcHeaderBytes, uint64_t(count));
  return {kLlmcHeaderBytes, uint64_t(count), uint64_t(model_vocab),
          "model.vocab_size " + std::to_string(model_vocab)};
}

}  // namespace ringstep
