// Weights out: the model's parameters as a safetensors file (Hugging Face's format: an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the raw little-endian data) under Hugging Face GPT-2 names and layouts,
// so that PyTorch (tools/load_in_pytorch.py) or transformers' GPT2LMHeadModel load it.
// docs/formats.md lists the mapping.
#pragma once

#include <cstdint>
#include <string>

namespace ringstep {

class Gpt;

// GPT-2's name for the registry tensor NAME ("h.3.attn.qkv.weight" -> "h.3.attn.c_attn.weight")
// and whether its 2-D layout is transposed there (GPT-2's Conv1D stores [in, out], ringstep's
// linear layers [out, in]; the embeddings are not transposed).
struct Gpt2Name {
  std::string name;
  bool transposed = false;
};
Gpt2Name gpt2_name(const std::string& registry_name);

// Writes MODEL's parameters (fp32, from any device) to PATH through PATH.tmp and a rename,
// with the model's shape in the header's __metadata__ (n_layer, n_head, n_embd, vocab_size,
// n_positions) and, when STEP >= 0, the optimizer step they are the weights of ("step").
// Throws SystemFault when PATH cannot be written.
void export_safetensors(const Gpt& model, const std::string& path, int64_t step = -1);

// The "step" of the safetensors file at PATH's __metadata__, or -1 when it has none.
// Throws InputError when PATH is not a safetensors file.
int64_t safetensors_step(const std::string& path);

// Reads the safetensors file at PATH, written by export_safetensors or any writer of the
// same names and layouts, into MODEL's parameters. Every parameter must be there as F32
// with GPT-2's shape for MODEL's config; tensors MODEL lacks (attention masks, lm_head)
// are ignored. Throws InputError naming the file and what is wrong; MODEL is untouched
// then.
void import_safetensors(const std::string& path, Gpt& model);

}  // namespace ringstep
