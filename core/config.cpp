// Reading configs: walk the YAML tree against the schema, apply overrides, check the
// cross-field rules; writing the effective config and the key reference.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config_schema.h"
#include "core/error.h"

namespace ringstep {
namespace {

using config_schema::find_key;
using config_schema::KeySpec;
using config_schema::Locator;
using config_schema::schema;

std::string_view parent_of(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view leaf_of(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string join_path(std::string_view section, std::string_view name) {
  return section.empty() ? std::string(name) : std::string(section) + "." + std::string(name);
}

// Every section path ("run", "precision", "precision.loss_scale", ...), then every key,
// each in schema order.
const std::vector<std::string>& paths() {
  static const std::vector<std::string> kPaths = [] {
    std::vector<std::string> out;
    for (const KeySpec& key : schema()) {
      for (std::string_view p = parent_of(key.path); !p.empty(); p = parent_of(p)) {
        if (std::find(out.begin(), out.end(), p) == out.end()) out.emplace_back(p);
      }
    }
    for (const KeySpec& key : schema()) out.emplace_back(key.path);
    return out;
  }();
  return kPaths;
}

bool is_section(std::string_view path) {
  return path.empty() ||
         (!find_key(path) && std::find(paths().begin(), paths().end(), path) != paths().end());
}

// "unknown key 'train.lrr'; did you mean 'train.lr'?" -- nearest within the same section
// first, then the key or section with the nearest last name anywhere ("train.betas" ->
// "optimizer.betas"); else the list of valid names in that section.
std::string unknown_key_message(std::string_view path) {
  std::string msg = "unknown key '" + std::string(path) + "'";
  std::string_view section = parent_of(path), name = leaf_of(path);
  std::vector<std::string_view> siblings, leaves;
  for (std::string_view p : paths()) {
    leaves.push_back(leaf_of(p));
    if (parent_of(p) == section) siblings.push_back(leaf_of(p));
  }
  std::string_view hint = config_schema::nearest(name, siblings);
  if (!hint.empty()) return msg + "; did you mean '" + join_path(section, hint) + "'?";
  hint = config_schema::nearest(name, leaves);
  if (!hint.empty()) {
    auto it = std::find(leaves.begin(), leaves.end(), hint);
    return msg + "; did you mean '" + paths()[it - leaves.begin()] + "'?";
  }
  msg +=
      section.empty() ? "; valid sections: " : "; valid keys in '" + std::string(section) + "': ";
  for (size_t i = 0; i < siblings.size(); ++i) msg += (i ? ", " : "") + std::string(siblings[i]);
  return msg;
}

// Fills CFG from a YAML tree and remembers where each key was set, for the messages of
// the cross-field checks.
class Reader {
 public:
  explicit Reader(Config& cfg) : cfg_(cfg) {}

  // Applies NODE as the value of PATH (a key or a section; "" is the top level).
  void apply(const std::string& path, const YAML::Node& node, const Locator& loc) {
    if (const KeySpec* key = find_key(path)) {
      key->decode(node, loc, cfg_);
      set_at_[path] = loc.at(node.Mark());
      return;
    }
    apply_section(path, node, loc);
  }

  // Where PATH was last set ("file:3:5", "--set a.b"), or "" if it kept its default.
  std::string where(const std::string& path) const {
    auto it = set_at_.find(path);
    return it == set_at_.end() ? "" : it->second;
  }

 private:
  void apply_section(const std::string& path, const YAML::Node& node, const Locator& loc) {
    if (node.IsNull()) return;  // "train:" with nothing under it: all defaults
    if (!node.IsMap()) {
      std::string what = path.empty() ? "the top level must be a map of sections"
                                      : "'" + path + "' must be a map of keys";
      throw InputError(loc.at(node.Mark()) + ": " + what + ", got " +
                       config_schema::describe_node(node));
    }
    std::map<std::string, std::string> seen;  // name -> where first set
    for (const auto& item : node) {
      const YAML::Node& name_node = item.first;
      std::string at = loc.at(name_node.Mark());
      if (!name_node.IsScalar()) throw InputError(at + ": a key must be a plain name");
      const std::string& name = name_node.Scalar();
      std::string child = join_path(path, name);
      if (name.find('.') != std::string::npos) {
        throw InputError(at + ": '" + name + "' is not a key here; write dotted keys nested (" +
                         "a: {b: 1}), dotted paths are for --set only");
      }
      if (!find_key(child) && !is_section(child)) {
        throw InputError(at + ": " + unknown_key_message(child));
      }
      if (auto [it, fresh] = seen.emplace(name, at); !fresh) {
        throw InputError(at + ": '" + child + "' is set twice (first at " + it->second + ")");
      }
      // A null value ("steps:" with nothing after it) has no position of its own.
      apply(child, item.second, item.second.IsNull() && !loc.fixed ? Locator{at, true} : loc);
    }
  }

  Config& cfg_;
  std::map<std::string, std::string> set_at_;
};

void apply_override(Reader& reader, const std::string& text) {
  size_t eq = text.find('=');
  std::string path = eq == std::string::npos ? "" : text.substr(0, eq);
  while (!path.empty() && path.back() == ' ') path.pop_back();
  if (path.empty()) {
    throw InputError("--set " + text + ": expected KEY=VALUE, e.g. --set train.lr=1e-3");
  }
  if (!find_key(path) && !is_section(path)) {
    throw InputError("--set " + text + ": " + unknown_key_message(path));
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    throw InputError("--set " + text + ": VALUE is not valid YAML: " + e.msg);
  }
  reader.apply(path, value, Locator{"--set " + path, true});
}

// Rules that tie keys together. Each message is located at the first named key that the
// file or an override set.
void check_cross_fields(const Config& c, const Reader& reader, const std::string& name) {
  auto fail = [&](std::initializer_list<std::string> keys, const std::string& msg) {
    std::string at = name;
    for (const std::string& k : keys) {
      if (!reader.where(k).empty()) {
        at = reader.where(k);
        break;
      }
    }
    throw InputError(at + ": " + msg);
  };
  auto num = [](double v) { return config_schema::format_double(v); };
  if (c.model.d_model % c.model.n_heads != 0) {
    fail({"model.n_heads", "model.d_model"}, "'model.d_model' (" + std::to_string(c.model.d_model) +
                                                 ") must be divisible by 'model.n_heads' (" +
                                                 std::to_string(c.model.n_heads) + ")");
  }
  if (c.data.source == DataSourceKind::file && c.data.path.empty()) {
    fail({"data.source", "data.path"}, "'data.source' is file but 'data.path' is not set");
  }
  const LossScaleConfig& ls = c.precision.loss_scale;
  if (ls.min_scale > ls.initial) {
    fail({"precision.loss_scale.min_scale", "precision.loss_scale.initial"},
         "'precision.loss_scale.min_scale' (" + num(ls.min_scale) +
             ") must be <= 'precision.loss_scale.initial' (" + num(ls.initial) + ")");
  }
}

std::string read_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  auto fail = [&] {
    return InputError("cannot read config '" + path + "': " + std::strerror(errno));
  };
  if (!f) throw fail();
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) throw fail();
  return text;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_file(path), path, overrides);
}

Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source_path = name;
  Locator file{name, false};
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw InputError(file.at(e.mark) + ": YAML syntax error: " + e.msg);
  }
  Reader reader(cfg);
  reader.apply("", root, file);  // an empty file (or only comments) is all defaults
  for (const std::string& o : overrides) apply_override(reader, o);
  check_cross_fields(cfg, reader, name);
  return cfg;
}

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
  out << YAML::BeginMap;
  std::vector<std::string_view> open;  // the sections the emitter is inside, outermost first
  for (const KeySpec& key : schema()) {
    std::vector<std::string_view> want;
    for (std::string_view p = parent_of(key.path); !p.empty(); p = parent_of(p)) {
      want.insert(want.begin(), leaf_of(p));
    }
    size_t common = 0;
    while (common < open.size() && common < want.size() && open[common] == want[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() < want.size(); open.push_back(want[open.size()])) {
      out << YAML::Key << std::string(want[open.size()]) << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << std::string(leaf_of(key.path)) << YAML::Value;
    key.encode(cfg, out);
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const KeySpec& key : schema()) out.emplace_back(key.path);
  return out;
}

std::string config_reference_markdown() {
  const Config defaults;
  std::string md;
  std::string_view current;
  for (const KeySpec& key : schema()) {
    std::string_view top = key.path.substr(0, key.path.find('.'));
    if (top != current) {
      current = top;
      md += std::string(md.empty() ? "" : "\n") + "### `" + std::string(top) + "`\n\n" +
            "| key | type | default | range | meaning |\n|---|---|---|---|---|\n";
    }
    md += "| `" + std::string(key.path) + "` | " + key.type + " | `" +
          config_schema::encode_inline(key, defaults) + "` | " +
          (key.range.empty() ? "any" : key.range) + " | " + std::string(key.doc) + " |\n";
  }
  return md;
}

}  // namespace ringstep
