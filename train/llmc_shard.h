// llm.c's token shards (docs/formats.md "llm.c shards"), as its dev/data scripts write them
// (write_datafile in dev/data/data_common.py) and its dataloader (llmc/dataloader.h) reads
// them: a header of 256 little-endian int32 (magic 20240520, version 1, token count, the
// rest 0) and then the tokens as little-endian uint16, GPT-2 token ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/token_stream.h"

namespace ringstep {

constexpr int kLlmcHeaderInts = 256;
constexpr size_t kLlmcHeaderBytes = 4 * kLlmcHeaderInts;
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
// llm.c's other files, which are not GPT-2 token shards; named in messages. Llama 3 shards
// (version 7) hold uint32 tokens; eval files (HellaSwag, MMLU) hold examples.
constexpr int32_t kLlmcLlama3Magic = 20240801;
constexpr int32_t kLlmcEvalMagic = 20240522;

// Writes TOKENS as an llm.c GPT-2 shard at PATH (through PATH.tmp, write_new_file), with
// the bytes llm.c's write_datafile writes. Throws InputError.
void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// The first int32 of BYTES[0, SIZE); 0 when SIZE < 4.
int32_t llmc_magic(const unsigned char* bytes, size_t size);

// The layout of the llm.c shard PATH, whose bytes are BYTES[0, SIZE) and whose magic is
// kLlmcMagic. Throws InputError naming PATH unless the version is 1 and the token count is
// positive and agrees with SIZE. Its tokens must be below MODEL_VOCAB.
TokenLayout parse_llmc_header(const std::string& path, const unsigned char* bytes, size_t size,
                              int model_vocab);

}  // namespace ringstep
