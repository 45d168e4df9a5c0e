// ringstep's token files (docs/formats.md "Token files"), written by `ringstep prepare`: a
// 32-byte header ("RSTOKENS", version 1, vocab_size, token count, bytes per token = 2,
// reserved 0) and then the tokens as little-endian uint16. Training reads them through
// train/token_stream.h, which checks every field and every token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/token_stream.h"

namespace ringstep {

constexpr size_t kTokenHeaderBytes = 32;
constexpr uint32_t kTokenFileVersion = 1;

// Writes PATH.tmp and renames it to PATH; on failure removes PATH.tmp and throws InputError.
void write_token_file(const std::string& path, uint32_t vocab_size,
                      const std::vector<uint16_t>& tokens);

// Whether BYTES[0, SIZE) starts with the magic "RSTOKENS".
bool has_token_file_magic(const unsigned char* bytes, size_t size);

// The layout of the token file PATH, whose bytes are BYTES[0, SIZE) and start with the
// magic. Throws InputError naming PATH unless the header is valid, the size matches it
// exactly and vocab_size <= MODEL_VOCAB. Its tokens must be below vocab_size.
TokenLayout parse_token_file_header(const std::string& path, const unsigned char* bytes,
                                    size_t size, int model_vocab);

}  // namespace ringstep
