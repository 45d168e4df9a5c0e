// Reading configs: walk the YAML tree against the schema, apply overrides, check the
// cross-field rules; writing the effective config and the key reference.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config_schema.h"
#include "core/error.h"
#include "core/files.h"

namespace ringstep {
namespace {

using config_schema::describe_node;
using config_schema::find_key;
using config_schema::KeySpec;
using config_schema::schema;

std::string_view parent_of(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view leaf_of(std::string_view path) { return path.substr(path.rfind('.') + 1); }

// Every section ("run", "precision.loss_scale", ...) and key, in schema order, each section
// before its first key.
const std::vector<std::string_view>& paths() {
  static const std::vector<std::string_view> kPaths = [] {
    std::vector<std::string_view> out;
    for (const KeySpec& key : schema()) {
      for (size_t dot = key.path.find('.'); dot != std::string_view::npos;
           dot = key.path.find('.', dot + 1)) {
        if (std::find(out.begin(), out.end(), key.path.substr(0, dot)) == out.end()) {
          out.push_back(key.path.substr(0, dot));
        }
      }
      out.push_back(key.path);
    }
    return out;
  }();
  return kPaths;
}

bool is_known(std::string_view path) {
  return path.empty() || std::find(paths().begin(), paths().end(), path) != paths().end();
}

// "unknown key 'train.lrr'; did you mean 'train.lr'?" -- nearest within the same section
// first, then the section or key with the nearest last name anywhere ("train.betas" ->
// "optimizer.betas"); else the names valid in that section. Sections come before keys.
std::string unknown_key_message(std::string_view path) {
  std::string msg = "unknown key '" + excerpt(path) + "'";
  std::string_view section = parent_of(path);
  std::vector<std::string_view> all, siblings, leaves;
  for (bool sections : {true, false}) {
    for (std::string_view p : paths()) {
      if ((find_key(p) == nullptr) != sections) continue;
      all.push_back(p);
      leaves.push_back(leaf_of(p));
      if (parent_of(p) == section) siblings.push_back(leaf_of(p));
    }
  }
  std::string prefix = section.empty() ? "" : std::string(section) + ".";
  if (std::string_view hint = config_schema::nearest(leaf_of(path), siblings); !hint.empty()) {
    return msg + "; did you mean '" + prefix + std::string(hint) + "'?";
  }
  if (std::string_view hint = config_schema::nearest(leaf_of(path), leaves); !hint.empty()) {
    auto it = std::find(leaves.begin(), leaves.end(), hint);
    return msg + "; did you mean '" + std::string(all[it - leaves.begin()]) + "'?";
  }
  msg +=
      section.empty() ? "; valid sections: " : "; valid keys in '" + std::string(section) + "': ";
  for (size_t i = 0; i < siblings.size(); ++i) msg += (i ? ", " : "") + std::string(siblings[i]);
  return msg;
}

// Fills CFG from YAML trees and remembers where each key was set, for the messages of the
// cross-field checks. A position is "FILE:LINE:COL", or FIXED (such as "--set train.lr")
// for every node of an override.
struct Reader {
  Config& cfg;
  std::string file;
  std::map<std::string, std::string> set_at;  // key -> where it was last set
  bool command_line = false;                  // applying a --set

  std::string at(const YAML::Mark& mark, const std::string& fixed) const {
    if (!fixed.empty() || mark.is_null()) return fixed.empty() ? file : fixed;
    return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }

  // Applies NODE as the value of PATH (a key or a section; "" is the top level).
  void apply(const std::string& path, const YAML::Node& node, const std::string& fixed) {
    if (const KeySpec* key = find_key(path)) {
      if (key->action && !command_line)
        throw InputError(at(node.Mark(), fixed) + ": '" + path +
                         "' is an action of one command, not part of an experiment: give it on "
                         "the command line (--set " +
                         path + "=true) so that a saved config never repeats it");
      try {
        key->decode(node, cfg);
      } catch (const config_schema::NodeError& e) {
        throw InputError(at(e.mark, fixed) + ": " + e.msg);
      }
      set_at[path] = at(node.Mark(), fixed);
      return;
    }
    if (node.IsNull()) return;  // "train:" with nothing under it: all defaults
    if (!node.IsMap()) {
      std::string what = path.empty() ? "the top level must be a map of sections"
                                      : "'" + path + "' must be a map of keys";
      throw InputError(at(node.Mark(), fixed) + ": " + what + ", got " + describe_node(node));
    }
    std::map<std::string, std::string> seen;  // name -> where first set
    for (const auto& item : node) {
      const YAML::Node &name_node = item.first, &value = item.second;
      std::string here = at(name_node.Mark(), fixed);
      if (!name_node.IsScalar()) throw InputError(here + ": a key must be a plain name");
      const std::string& name = name_node.Scalar();
      std::string child = path.empty() ? name : path + "." + name;
      if (name.find('.') != std::string::npos) {
        throw InputError(here + ": '" + excerpt(name) +
                         "' is not a key here; write dotted keys nested (" +
                         "a: {b: 1}), dotted paths are for --set only");
      }
      if (!is_known(child)) throw InputError(here + ": " + unknown_key_message(child));
      if (auto [it, fresh] = seen.emplace(name, here); !fresh) {
        throw InputError(here + ": '" + excerpt(child) + "' is set twice (first at " + it->second +
                         ")");
      }
      // A null value ("steps:" with nothing after it) has no position of its own.
      apply(child, value, value.IsNull() && fixed.empty() ? here : fixed);
    }
  }

  void apply_override(const std::string& text) {
    size_t eq = text.find('=');
    std::string path = eq == std::string::npos ? "" : text.substr(0, eq);
    while (!path.empty() && path.back() == ' ') path.pop_back();
    if (path.empty()) {
      throw InputError("--set " + excerpt(text) + ": expected KEY=VALUE, e.g. --set train.lr=1e-3");
    }
    if (!is_known(path)) {
      throw InputError("--set " + excerpt(text) + ": " + unknown_key_message(path));
    }
    YAML::Node value;
    try {
      value = load_one_document(text.substr(eq + 1), "--set " + path);
    } catch (const YAML::ParserException& e) {
      throw InputError("--set " + excerpt(text) + ": VALUE is not valid YAML: " + e.msg);
    }
    command_line = true;
    apply(path, value, "--set " + path);
    command_line = false;
  }

  // The one YAML document in TEXT (null when there is none): a second one, after "---", is
  // refused rather than ignored. FIXED as in at(). Throws YAML::ParserException on bad syntax.
  YAML::Node load_one_document(const std::string& text, const std::string& fixed) const {
    const std::vector<YAML::Node> docs = YAML::LoadAll(text);
    if (docs.size() > 1) {
      throw InputError(at(docs[1].Mark(), fixed) +
                       ": a second YAML document (after '---'); a config is one document");
    }
    return docs.empty() ? YAML::Node() : docs[0];
  }

  // Throws MSG located at the first of KEYS that an override set, else at the first that the
  // file set: the user's latest word is the one to point at.
  [[noreturn]] void fail(std::initializer_list<std::string> keys, const std::string& msg) const {
    for (bool overrides : {true, false})
      for (const std::string& k : keys)
        if (auto it = set_at.find(k);
            it != set_at.end() && it->second.starts_with("--set ") == overrides)
          throw InputError(it->second + ": " + msg);
    throw InputError(file + ": " + msg);
  }
};

// Rules that tie keys together.
void check_cross_fields(const Config& c, const Reader& reader) {
  auto num = [](double v) { return config_schema::format_double(v); };
  if (c.model.d_model % c.model.n_heads != 0) {
    reader.fail({"model.n_heads", "model.d_model"}, "'model.d_model' (" +
                                                        std::to_string(c.model.d_model) +
                                                        ") must be divisible by 'model.n_heads' (" +
                                                        std::to_string(c.model.n_heads) + ")");
  }
  if (c.data.source == DataSourceKind::file && c.data.path.empty()) {
    reader.fail({"data.source", "data.path"}, "'data.source' is file but 'data.path' is not set");
  }
  if (c.data.source == DataSourceKind::synthetic) {
    const std::string why =
        "' is set but 'data.source' is synthetic, which reads no file; set data.source=file "
        "to train on it";
    if (!c.data.path.empty()) reader.fail({"data.path"}, "'data.path" + why);
    if (!c.data.val_path.empty()) reader.fail({"data.val_path"}, "'data.val_path" + why);
    if (c.data.format != DataFormat::auto_) reader.fail({"data.format"}, "'data.format" + why);
  }
  const LossScaleConfig& ls = c.precision.loss_scale;
  if (ls.min_scale > ls.initial) {
    reader.fail({"precision.loss_scale.min_scale", "precision.loss_scale.initial"},
                "'precision.loss_scale.min_scale' (" + num(ls.min_scale) +
                    ") must be <= 'precision.loss_scale.initial' (" + num(ls.initial) + ")");
  }
  if (c.comm.backend == CommBackend::nccl && c.run.device != Device::cuda) {
    const std::string device(name(c.run.device));
    reader.fail({"comm.backend", "run.device"},
                "'comm.backend' nccl reduces gradients in GPU memory: it needs run.device "
                "cuda; use mpi on " +
                    device);
  }
  // What the GPU trainer does not run yet (docs/gpu.md). 1-bit Adam runs on cuda through
  // the device path only (comm.backend nccl: its exchange on the device's buffers), and
  // compress: auto's measurement of the coding is the host path's.
  if (c.run.device == Device::cuda && c.optimizer.name == OptimizerKind::zero_one_adam) {
    reader.fail({"optimizer.name", "run.device"},
                "'optimizer.name' zero_one_adam runs on run.device cpu only; use adamw or "
                "onebit_adam on cuda");
  }
  if (c.run.device == Device::cuda && c.optimizer.name == OptimizerKind::onebit_adam) {
    if (c.comm.backend != CommBackend::nccl) {
      reader.fail({"optimizer.name", "comm.backend"},
                  "'optimizer.name' onebit_adam on run.device cuda needs comm.backend nccl (the "
                  "compressed exchange on the GPU); comm.backend " +
                      std::string(name(c.comm.backend)) + " runs it on run.device cpu only");
    } else if (c.optimizer.onebit.compress == OneBitCompress::auto_) {
      reader.fail({"optimizer.onebit.compress", "optimizer.name", "run.device"},
                  "'optimizer.onebit.compress' auto (the default) measures the coding on the "
                  "host path, which onebit_adam on run.device cuda does not take; set it to "
                  "always or never");
    }
  }
}

// Writes SECTION's keys and subsections as one YAML map, in schema order.
void emit_section(YAML::Emitter& out, const Config& cfg, std::string_view section) {
  out << YAML::BeginMap;
  for (std::string_view p : paths()) {
    if (parent_of(p) != section) continue;
    const KeySpec* key = find_key(p);
    if (key && key->action) continue;
    out << YAML::Key << std::string(leaf_of(p)) << YAML::Value;
    if (key)
      key->encode(cfg, out);
    else
      emit_section(out, cfg, p);
  }
  out << YAML::EndMap;
}

}  // namespace

LossScaleMode resolved_loss_scale_mode(const PrecisionConfig& cfg) {
  if (cfg.loss_scale.mode != LossScaleMode::auto_) return cfg.loss_scale.mode;
  return cfg.dtype == DType::f16 ? LossScaleMode::dynamic : LossScaleMode::none;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_regular_file(path, kMaxConfigBytes, "config"), path, overrides);
}

Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source_path = name;
  Reader reader{cfg, name, {}};
  YAML::Node root;
  try {
    root = reader.load_one_document(yaml_text, "");
  } catch (const YAML::ParserException& e) {
    throw InputError(reader.at(e.mark, "") + ": YAML syntax error: " + e.msg);
  }
  reader.apply("", root, "");  // an empty file (or only comments) is all defaults
  for (const std::string& o : overrides) reader.apply_override(o);
  check_cross_fields(cfg, reader);
  return cfg;
}

void check_config(const Config& cfg) { parse_config(config_to_yaml(cfg), "effective config"); }

void validate_for_world(const Config& cfg, int world_size) {
  if (world_size < 1)
    throw InputError("world size must be >= 1, got " + std::to_string(world_size));
  const TrainConfig& t = cfg.train;
  int64_t derived = int64_t{t.micro_batch} * t.grad_accum_steps * world_size;
  if (t.global_batch == 0 || t.global_batch == derived) return;
  std::string at = cfg.source_path.empty() ? "" : cfg.source_path + ": ";
  std::string msg =
      at + "'train.global_batch' is " + std::to_string(t.global_batch) + " but micro_batch (" +
      std::to_string(t.micro_batch) + ") x grad_accum_steps (" +
      std::to_string(t.grad_accum_steps) + ") x world_size (" + std::to_string(world_size) +
      ") = " + std::to_string(derived) + " sequences; the global batch must equal that product";
  int64_t per_accum = int64_t{t.micro_batch} * world_size;
  if (t.global_batch % per_accum == 0) {
    msg += " (e.g. set train.grad_accum_steps=" + std::to_string(t.global_batch / per_accum) + ")";
  }
  throw InputError(msg + ", or set train.global_batch=0 to derive it");
}

std::string config_to_yaml(const Config& cfg) {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  emit_section(out, cfg, "");
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const KeySpec& key : schema()) out.emplace_back(key.path);
  return out;
}

std::string config_reference_markdown() {
  std::string md;
  for (std::string_view p : paths()) {
    if (p.find('.') == std::string_view::npos) {
      md += std::string(md.empty() ? "" : "\n") + "### `" + std::string(p) + "`\n\n" +
            "| key | type | default | range | meaning |\n|---|---|---|---|---|\n";
    } else if (const KeySpec* key = find_key(p)) {
      md += "| `" + std::string(key->path) + "` | " + key->type + " | `" + key->def + "` | " +
            (key->range.empty() ? "any" : key->range) + " | " + std::string(key->doc) + " |\n";
    }
  }
  return md;
}

}  // namespace ringstep
