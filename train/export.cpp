#include "train/export.h"

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/little_endian.h"
#include "models/gpt.h"
#include "train/run_dir.h"

namespace ringstep {
namespace {

// ringstep's piece of a registry name -> GPT-2's.
constexpr std::pair<const char*, const char*> kRenames[] = {
    {"ln1.", "ln_1."},
    {"ln2.", "ln_2."},
    {"attn.qkv.", "attn.c_attn."},
    {"attn.proj.", "attn.c_proj."},
    {"mlp.fc.", "mlp.c_fc."},
    {"mlp.proj.", "mlp.c_proj."},
    {"lnf.", "ln_f."},
};

// dst[c, r] = src[r, c] for SRC of ROWS x COLS (row-major both).
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// The tensor's values in GPT-2's layout, as little-endian bytes (x86 and ARM are).
std::string tensor_bytes(const float* data, const TensorInfo& t, bool transposed) {
  std::string out(t.numel * sizeof(float), '\0');
  auto* dst = reinterpret_cast<float*>(out.data());
  if (transposed)
    transpose(data, t.shape[0], t.shape[1], dst);  // [out, in] -> [in, out]
  else
    std::memcpy(dst, data, out.size());
  return out;
}

// Tensor T's values from bytes in GPT-2's layout (the inverse of tensor_bytes).
void read_tensor(const char* bytes, const TensorInfo& t, bool transposed, float* out) {
  const auto* src = reinterpret_cast<const float*>(bytes);
  if (transposed)
    transpose(src, t.shape[1], t.shape[0], out);  // [in, out] -> [out, in]
  else
    std::memcpy(out, src, t.numel * sizeof(float));
}

// The header of safetensors FILE (named PATH in messages), and where its data starts.
std::pair<nlohmann::json, size_t> safetensors_header(const std::string& file,
                                                     const std::string& path) {
  if (file.size() < 8)
    throw InputError(path + ": not a safetensors file (" + std::to_string(file.size()) +
                     " bytes, fewer than its 8-byte header length)");
  const uint64_t n = get_le(reinterpret_cast<const unsigned char*>(file.data()), 8);
  if (n > file.size() - 8)
    throw InputError(path + ": not a safetensors file (its 8-byte header length " +
                     std::to_string(n) + " exceeds the file's " + std::to_string(file.size()) +
                     " bytes)");
  nlohmann::json header =
      nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + long(n), nullptr, false);
  if (!header.is_object())
    throw InputError(path + ": not a safetensors file (its header is not a JSON object)");
  return {std::move(header), 8 + size_t(n)};
}

// Tensor T as GPT-2 has it: the token embedding without the vocabulary's padded rows (the
// first vocab_size rows; model.pad_vocab_to_multiple), every other tensor as it is.
TensorInfo exported(const TensorInfo& t, const ModelConfig& m) {
  TensorInfo e = t;
  if (t.name == "wte") {
    e.shape[0] = m.vocab_size;
    e.numel = size_t(m.vocab_size) * size_t(t.shape[1]);
  }
  return e;
}

}  // namespace

void import_safetensors(const std::string& path, Gpt& model) {
  const std::string file = read_regular_file(path, kNoSizeLimit, "train.init_from");
  const auto [header, data_begin] = safetensors_header(file, path);
  const size_t data_bytes = file.size() - data_begin;
  FlatBuffer params(model.params().size());  // on the host, zeroed; copied to the model's device
  for (const TensorInfo& info : model.registry().tensors()) {
    const TensorInfo t = exported(info, model.config());
    const Gpt2Name g = gpt2_name(t.name);
    std::vector<int64_t> shape = t.shape;
    if (g.transposed) std::swap(shape[0], shape[1]);
    const nlohmann::json& entry = header.contains(g.name) ? header[g.name] : nlohmann::json();
    const std::string where = path + ": tensor " + g.name;
    if (!entry.is_object()) throw InputError(where + " is missing");
    const auto dtype = entry.value("dtype", nlohmann::json()),
               dims = entry.value("shape", nlohmann::json());
    const auto range = entry.value("data_offsets", nlohmann::json());
    if (dtype != "F32")
      throw InputError(where + " has dtype " + dtype.dump() + ", expected \"F32\"");
    if (dims != nlohmann::json(shape))
      throw InputError(where + " has shape " + dims.dump() + ", this model's is " +
                       nlohmann::json(shape).dump() + " (model.* must match the exported model)");
    const bool ok = range.is_array() && range.size() == 2 && range[0].is_number_unsigned() &&
                    range[1].is_number_unsigned();
    const size_t begin = ok ? range[0].get<size_t>() : 0, end = ok ? range[1].get<size_t>() : 0;
    if (!ok || end < begin || end > data_bytes || end - begin != t.numel * sizeof(float))
      throw InputError(where + " has data_offsets " + range.dump() + ", which do not hold " +
                       std::to_string(t.numel) + " floats inside the file's " +
                       std::to_string(data_bytes) + " data bytes");
    read_tensor(file.data() + data_begin + begin, t, g.transposed, params.data() + t.offset);
  }
  copy_buffer(model.params(), params);
}

Gpt2Name gpt2_name(const std::string& registry_name) {
  if (registry_name == "wte" || registry_name == "wpe") return {registry_name + ".weight", false};
  std::string name = registry_name;
  for (const auto& [ours, theirs] : kRenames) {
    const size_t at = name.find(ours);
    if (at != std::string::npos) name.replace(at, std::strlen(ours), theirs);
  }
  const bool matrix = name.ends_with(".weight") && name.find("ln_") == std::string::npos;
  return {name, matrix};
}

void export_safetensors(const Gpt& model, const std::string& path, int64_t step) {
  const ModelConfig& mc = model.config();
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"n_layer", std::to_string(mc.n_layers)},
                            {"n_head", std::to_string(mc.n_heads)},
                            {"n_embd", std::to_string(mc.d_model)},
                            {"vocab_size", std::to_string(mc.vocab_size)},
                            {"n_positions", std::to_string(mc.seq_len)}};
  if (step >= 0) header["__metadata__"]["step"] = std::to_string(step);
  FlatBuffer host_copy;
  const FlatBuffer& params = on_host(model.params(), host_copy);
  std::string data;
  for (const TensorInfo& info : model.registry().tensors()) {
    const TensorInfo t = exported(info, mc);
    const Gpt2Name g = gpt2_name(t.name);
    std::vector<int64_t> shape = t.shape;
    if (g.transposed) std::swap(shape[0], shape[1]);
    const size_t begin = data.size();
    data += tensor_bytes(params.at(t), t, g.transposed);
    header[g.name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string head = header.dump();
  head.resize((head.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  std::string file(8, '\0');
  const uint64_t n = head.size();
  put_le(reinterpret_cast<unsigned char*>(file.data()), n, 8);
  write_file_atomic(path, file + head + data);
}

int64_t safetensors_step(const std::string& path) {
  const std::string file = read_regular_file(path, kNoSizeLimit, "safetensors file");
  const nlohmann::json meta =
      safetensors_header(file, path).first.value("__metadata__", nlohmann::json::object());
  const auto step = meta.find("step");
  if (step == meta.end() || !step->is_string()) return -1;
  try {
    return std::stoll(step->get<std::string>());
  } catch (const std::exception&) {
    throw InputError(path + ": __metadata__ step '" + excerpt(step->get<std::string>()) +
                     "' is not a number");
  }
}

}  // namespace ringstep
