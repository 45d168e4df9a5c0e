// Token files (docs/formats.md): a 32-byte header ("RSTOKENS", version 1, vocab_size,
// token count, bytes per token = 2, reserved 0) and then the tokens as little-endian
// uint16. Readers load the whole file and check every field and every token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/data.h"

namespace ringstep {

constexpr size_t kTokenHeaderBytes = 32;
constexpr uint32_t kTokenFileVersion = 1;
constexpr uint32_t kTokenBytes = 2;

struct LoadedTokens {
  uint32_t vocab_size = 0;
  std::vector<uint16_t> tokens;
};

// Writes PATH.tmp and renames it to PATH; on failure removes PATH.tmp and throws InputError.
void write_token_file(const std::string& path, uint32_t vocab_size,
                      const std::vector<uint16_t>& tokens);
// Throws InputError naming PATH unless the header is valid, the size matches it exactly,
// vocab_size <= MODEL_VOCAB and every token < vocab_size.
LoadedTokens read_token_file(const std::string& path, int model_vocab);

// Needs at least 2 * (seq_len + 1) tokens in each file. Without data.val_path the last
// max(10%, seq_len + 1) tokens are the val part. Train rank r owns windows r, r + world,
// ... of its part, so ranks never share a window; it reads them in file order, or with
// data.shuffle in a new order each epoch (seeded by run.seed, rank and epoch). Val reads
// its windows in order.
std::unique_ptr<DataSource> make_file_source(const Config& cfg, const std::string& split, int rank,
                                             int world);

}  // namespace ringstep
