// The schema table and the per-kind codecs (YAML node <-> struct field).
#include "core/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "core/error.h"

namespace ringstep::config_schema {
namespace {

constexpr Range any() { return {}; }
constexpr Range at_least(double lo) { return {lo, kInf, false, false}; }
constexpr Range above(double lo) { return {lo, kInf, true, false}; }
constexpr Range closed(double lo, double hi) { return {lo, hi, false, false}; }
constexpr Range half_open(double lo, double hi) { return {lo, hi, false, true}; }
constexpr Range open_closed(double lo, double hi) { return {lo, hi, true, false}; }
constexpr Range open(double lo, double hi) { return {lo, hi, true, true}; }

#define FIELD(member) [](Config& c) -> FieldRef { return &c.member; }

// clang-format off
const std::vector<KeySpec> kSchema = {
  {"run.name", Kind::String, FIELD(run.name), any(), {}, "run name, shown in logs and the summary"},
  {"run.out_dir", Kind::String, FIELD(run.out_dir), any(), {}, "run directory: config.yaml, steps.jsonl, trace/, checkpoints/"},
  {"run.seed", Kind::Uint64, FIELD(run.seed), any(), {}, "seed for weight init and data; same config, seed and world size give the same losses"},
  {"run.device", Kind::Enum, FIELD(run.device), any(), {"cpu", "cuda"}, "where the model runs"},
  {"run.threads", Kind::AutoInt, FIELD(run.threads), at_least(1), {}, "CPU threads per rank; auto = cores / ranks on this node"},

  {"model.vocab_size", Kind::Int, FIELD(model.vocab_size), closed(2, 65536), {}, "vocabulary size (tokens are uint16 on disk)"},
  {"model.seq_len", Kind::Int, FIELD(model.seq_len), at_least(1), {}, "context length T in tokens"},
  {"model.d_model", Kind::Int, FIELD(model.d_model), at_least(1), {}, "hidden width C; must be divisible by n_heads"},
  {"model.n_layers", Kind::Int, FIELD(model.n_layers), at_least(1), {}, "number of Transformer blocks L"},
  {"model.n_heads", Kind::Int, FIELD(model.n_heads), at_least(1), {}, "attention heads per block"},

  {"data.source", Kind::Enum, FIELD(data.source), any(), {"synthetic", "file"}, "synthetic = seeded Markov source with a known entropy floor; file = token file"},
  {"data.path", Kind::NullablePath, FIELD(data.path), any(), {}, "token file (from `ringstep prepare`); required when source is file"},
  {"data.val_path", Kind::NullablePath, FIELD(data.val_path), any(), {}, "held-out token file; null = the tail of path"},

  {"train.steps", Kind::Int, FIELD(train.steps), at_least(1), {}, "optimizer steps"},
  {"train.micro_batch", Kind::Int, FIELD(train.micro_batch), at_least(1), {}, "sequences per rank per forward/backward"},
  {"train.grad_accum_steps", Kind::Int, FIELD(train.grad_accum_steps), at_least(1), {}, "micro-batches accumulated per optimizer step"},
  {"train.global_batch", Kind::Int, FIELD(train.global_batch), at_least(0), {}, "0 = derived; else must equal micro_batch x grad_accum_steps x world_size"},
  {"train.lr", Kind::Double, FIELD(train.lr), above(0), {}, "peak learning rate"},
  {"train.min_lr_ratio", Kind::Double, FIELD(train.min_lr_ratio), closed(0, 1), {}, "final lr = lr x min_lr_ratio (cosine, linear)"},
  {"train.warmup_steps", Kind::Int, FIELD(train.warmup_steps), at_least(0), {}, "linear warmup from 0 to lr; may exceed steps"},
  {"train.schedule", Kind::Enum, FIELD(train.schedule), any(), {"cosine", "linear", "constant"}, "lr decay after warmup"},
  {"train.weight_decay", Kind::Double, FIELD(train.weight_decay), at_least(0), {}, "decoupled (AdamW) weight decay on matrices"},
  {"train.grad_clip", Kind::Double, FIELD(train.grad_clip), at_least(0), {}, "clip the global gradient norm to this; 0 = off"},
  {"train.eval_every", Kind::Int, FIELD(train.eval_every), at_least(0), {}, "validation loss every N steps; 0 = only at the end"},
  {"train.eval_batches", Kind::Int, FIELD(train.eval_batches), at_least(1), {}, "micro-batches per validation pass"},
  {"train.check_replicas_every", Kind::Int, FIELD(train.check_replicas_every), at_least(0), {}, "check every N steps that all ranks hold identical weights; 0 = never"},

  {"precision.dtype", Kind::Enum, FIELD(precision.dtype), any(), {"fp32", "bf16", "fp16"}, "activation and matmul-input dtype; master weights stay fp32"},
  {"precision.loss_scale.mode", Kind::Enum, FIELD(precision.loss_scale.mode), any(), {"auto", "dynamic", "static", "none"}, "loss scaling; auto = dynamic for fp16, none for bf16 and fp32 (they have fp32's exponent range); see docs/precision.md"},
  {"precision.loss_scale.initial", Kind::Double, FIELD(precision.loss_scale.initial), open_closed(0, kMaxLossScale), {}, "starting scale (the scale for static); at most 2^24, see docs/precision.md"},
  {"precision.loss_scale.growth_factor", Kind::Double, FIELD(precision.loss_scale.growth_factor), above(1), {}, "scale *= this after growth_interval clean steps in a row (never above 2^24)"},
  {"precision.loss_scale.backoff_factor", Kind::Double, FIELD(precision.loss_scale.backoff_factor), open(0, 1), {}, "scale *= this on an overflow once hysteresis has run out (never below min_scale)"},
  {"precision.loss_scale.growth_interval", Kind::Int, FIELD(precision.loss_scale.growth_interval), at_least(1), {}, "clean steps in a row before the scale grows"},
  {"precision.loss_scale.hysteresis", Kind::Int, FIELD(precision.loss_scale.hysteresis), at_least(1), {}, "overflows before the first backoff; re-armed only when the scale grows"},
  {"precision.loss_scale.min_scale", Kind::Double, FIELD(precision.loss_scale.min_scale), open_closed(0, kMaxLossScale), {}, "floor for the scale; must be <= initial"},
  {"precision.loss_scale.max_consecutive_skips", Kind::Int, FIELD(precision.loss_scale.max_consecutive_skips), at_least(1), {}, "stop the run after this many skipped (inf/NaN) steps in a row, in every mode"},

  {"recompute.policy", Kind::Enum, FIELD(recompute.policy), any(), {"none", "full", "every_k", "selective"}, "activation recomputation: none, every block, every k-th block, attention only"},
  {"recompute.k", Kind::Int, FIELD(recompute.k), at_least(1), {}, "for every_k: recompute blocks whose index is a multiple of k"},

  {"optimizer.name", Kind::Enum, FIELD(optimizer.name), any(), {"adamw", "onebit_adam"}, "optimizer"},
  {"optimizer.betas", Kind::DoublePair, FIELD(optimizer.betas), half_open(0, 1), {}, "Adam beta1, beta2"},
  {"optimizer.eps", Kind::Double, FIELD(optimizer.eps), above(0), {}, "Adam epsilon"},
  {"optimizer.onebit.freeze_step", Kind::Int, FIELD(optimizer.onebit.freeze_step), at_least(0), {}, "1-bit Adam: full-precision warmup steps before the variance freezes"},
  {"optimizer.onebit.scale", Kind::Enum, FIELD(optimizer.onebit.scale), any(), {"mean_abs", "l2"}, "1-bit Adam: per-chunk scale of the sign vector"},

  {"comm.backend", Kind::Enum, FIELD(comm.backend), any(), {"mpi", "nccl"}, "transport"},
  {"comm.allreduce", Kind::Enum, FIELD(comm.allreduce), any(), {"ring", "native"}, "ring = ringstep's ring AllReduce; native = the library's"},
  {"comm.bucket_mb", Kind::Double, FIELD(comm.bucket_mb), above(0), {}, "gradient bucket size in MiB"},
  {"comm.overlap", Kind::Bool, FIELD(comm.overlap), any(), {}, "start each bucket's AllReduce during backward"},
  {"comm.link.bandwidth_gbps", Kind::Double, FIELD(comm.link.bandwidth_gbps), at_least(0), {}, "emulated link bandwidth in Gbit/s; 0 = no emulation"},
  {"comm.link.latency_us", Kind::Double, FIELD(comm.link.latency_us), at_least(0), {}, "emulated per-message latency in microseconds; 0 = none"},

  {"profile.enabled", Kind::Bool, FIELD(profile.enabled), any(), {}, "time every step"},
  {"profile.log_every", Kind::Int, FIELD(profile.log_every), at_least(1), {}, "aggregate across ranks and print every N steps"},
  {"profile.trace_steps", Kind::StepWindow, FIELD(profile.trace_steps), any(), {}, "Chrome trace of steps first..last (inclusive); [] = none"},
  {"profile.peak_gflops", Kind::AutoDouble, FIELD(profile.peak_gflops), above(0), {}, "peak GFLOP/s per rank for MFU; auto = measured at start"},

  {"checkpoint.every", Kind::Int, FIELD(checkpoint.every), at_least(0), {}, "save every N steps; 0 = never"},
  {"checkpoint.keep", Kind::Int, FIELD(checkpoint.keep), at_least(1), {}, "checkpoints kept (oldest deleted first)"},
  {"checkpoint.resume", Kind::String, FIELD(checkpoint.resume), any(), {}, "auto = latest in out_dir if any; never; or a checkpoint path"},
};
// clang-format on

#undef FIELD

std::string number_text(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string quoted(std::string_view s) {
  std::string out(1, '\'');
  out += s;
  out += '\'';
  return out;
}

std::string join(const std::vector<std::string_view>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

// Parses the whole of S as a number (a leading '+' allowed); false on any leftover text.
template <class T>
bool parse_number(std::string_view s, T& out) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-') s.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Throws "WHERE: 'KEY' must be WHAT, got GOT".
[[noreturn]] void fail(const KeySpec& key, const Locator& loc, const YAML::Node& node,
                       const std::string& what, const std::string& got) {
  throw InputError(loc.at(node.Mark()) + ": '" + std::string(key.path) + "' must be " + what +
                   ", got " + got);
}

std::string scalar_of(const KeySpec& key, const YAML::Node& node, const Locator& loc,
                      const std::string& what) {
  if (!node.IsScalar()) fail(key, loc, node, what, describe_node(node));
  return node.Scalar();
}

void check_range(const KeySpec& key, const YAML::Node& node, const Locator& loc, double v,
                 const std::string& prefix = "") {
  if (!key.range.contains(v)) fail(key, loc, node, prefix + key.range.describe(), node.Scalar());
}

int decode_int(const KeySpec& key, const YAML::Node& node, const Locator& loc,
               const std::string& what, const std::string& range_prefix = "") {
  std::string text = scalar_of(key, node, loc, what);
  long long v = 0;
  if (!parse_number(text, v)) fail(key, loc, node, what, quoted(text));
  check_range(key, node, loc, static_cast<double>(v), range_prefix);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    fail(key, loc, node, "a 32-bit integer", text);
  }
  return static_cast<int>(v);
}

double decode_double(const KeySpec& key, const YAML::Node& node, const Locator& loc,
                     const std::string& what, const std::string& range_prefix = "") {
  std::string text = scalar_of(key, node, loc, what);
  double v = 0;
  if (!parse_number(text, v)) fail(key, loc, node, what, quoted(text));
  if (!std::isfinite(v)) fail(key, loc, node, "finite", text);
  check_range(key, node, loc, v, range_prefix);
  return v;
}

// The phrase after "must be" for a wrong type.
std::string expected(const KeySpec& key) {
  switch (key.kind) {
    case Kind::Int:
      return "an integer";
    case Kind::Uint64:
      return "a non-negative integer";
    case Kind::Double:
      return "a number";
    case Kind::Bool:
      return "true or false";
    case Kind::String:
      return "a non-empty string";
    case Kind::Enum:
      return "one of " + join(key.choices, ", ");
    case Kind::NullablePath:
      return "null or a path";
    case Kind::AutoInt:
      return "auto or an integer";
    case Kind::AutoDouble:
      return "auto or a number";
    case Kind::DoublePair:
      return "a list of 2 numbers";
    case Kind::StepWindow:
      return "[] or [first, last] with 0 < first <= last";
  }
  return "";
}

std::string list_text(const YAML::Node& node) {
  std::string out = "[";
  for (size_t i = 0; i < node.size(); ++i) {
    if (i) out += ", ";
    out += node[i].IsScalar() ? node[i].Scalar() : describe_node(node[i]);
  }
  return out + "]";
}

void decode_enum(const KeySpec& key, const YAML::Node& node, const Locator& loc, std::string& out) {
  std::string text = scalar_of(key, node, loc, expected(key));
  if (std::find(key.choices.begin(), key.choices.end(), text) != key.choices.end()) {
    out = text;
    return;
  }
  std::string got = quoted(text);
  std::string_view hint = nearest(text, key.choices);
  if (!hint.empty()) got += "; did you mean " + quoted(hint) + "?";
  fail(key, loc, node, expected(key), got);
}

std::array<double, 2> decode_pair(const KeySpec& key, const YAML::Node& node, const Locator& loc) {
  if (!node.IsSequence() || node.size() != 2) {
    fail(key, loc, node, expected(key), node.IsSequence() ? list_text(node) : describe_node(node));
  }
  std::array<double, 2> out{};
  for (size_t i = 0; i < 2; ++i) {
    out[i] = decode_double(key, node[i], loc, "a list of 2 numbers", "a list of 2 numbers each ");
  }
  return out;
}

std::vector<int> decode_window(const KeySpec& key, const YAML::Node& node, const Locator& loc) {
  bool shape_ok = node.IsSequence() && (node.size() == 0 || node.size() == 2);
  if (!shape_ok) {
    fail(key, loc, node, expected(key), node.IsSequence() ? list_text(node) : describe_node(node));
  }
  std::vector<int> out;
  for (size_t i = 0; i < node.size(); ++i)
    out.push_back(decode_int(key, node[i], loc, expected(key)));
  if (!out.empty() && !(0 < out[0] && out[0] <= out[1])) {
    fail(key, loc, node, expected(key), list_text(node));
  }
  return out;
}

bool decode_bool(const KeySpec& key, const YAML::Node& node, const Locator& loc) {
  std::string text = scalar_of(key, node, loc, expected(key));
  bool v = false;
  if (!YAML::convert<bool>::decode(node, v)) fail(key, loc, node, expected(key), quoted(text));
  return v;
}

// Whether a YAML reader would take S as something other than a string (bool, null, number),
// so that the emitter must quote it.
bool looks_typed(const std::string& s) {
  static const std::vector<std::string_view> kWords = {
      "y",  "Y",    "yes",  "Yes",  "YES",   "n",     "N",     "no", "No",
      "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On",
      "ON", "off",  "Off",  "OFF",  "null",  "Null",  "NULL",  "~"};
  if (std::find(kWords.begin(), kWords.end(), s) != kWords.end()) return true;
  double d = 0;
  return parse_number(s, d) || s.starts_with(".inf") || s.starts_with(".nan") ||
         s.starts_with("-.inf") || s.starts_with(".NaN") || s.starts_with(".Inf");
}

void emit_string(YAML::Emitter& out, const std::string& s) {
  if (looks_typed(s)) out << YAML::DoubleQuoted;
  out << s;
}

}  // namespace

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return quoted(node.Scalar());
    default:
      return "null";
  }
}

bool Range::contains(double v) const {
  bool lo_ok = lo_open ? v > lo : v >= lo;
  bool hi_ok = hi_open ? v < hi : v <= hi;
  return lo_ok && hi_ok;
}

std::string Range::describe() const {
  bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
           (hi_open ? ")" : "]");
  }
  if (has_lo) return (lo_open ? "> " : ">= ") + number_text(lo);
  if (has_hi) return (hi_open ? "< " : "<= ") + number_text(hi);
  return "";
}

std::string Locator::at(const YAML::Mark& mark) const {
  if (fixed || mark.is_null()) return name;
  return name + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

const std::vector<KeySpec>& schema() { return kSchema; }

const KeySpec* find_key(std::string_view path) {
  for (const KeySpec& key : kSchema) {
    if (key.path == path) return &key;
  }
  return nullptr;
}

void decode(const KeySpec& key, const YAML::Node& node, Config& cfg, const Locator& loc) {
  FieldRef field = key.field(cfg);
  switch (key.kind) {
    case Kind::Int:
      *std::get<int*>(field) = decode_int(key, node, loc, expected(key));
      return;
    case Kind::Uint64: {
      std::string text = scalar_of(key, node, loc, expected(key));
      if (!parse_number(text, *std::get<uint64_t*>(field))) {
        fail(key, loc, node, expected(key), quoted(text));
      }
      return;
    }
    case Kind::Double:
      *std::get<double*>(field) = decode_double(key, node, loc, expected(key));
      return;
    case Kind::Bool:
      *std::get<bool*>(field) = decode_bool(key, node, loc);
      return;
    case Kind::String: {
      std::string text = scalar_of(key, node, loc, expected(key));
      if (text.empty()) fail(key, loc, node, expected(key), "''");
      *std::get<std::string*>(field) = text;
      return;
    }
    case Kind::Enum:
      decode_enum(key, node, loc, *std::get<std::string*>(field));
      return;
    case Kind::NullablePath:
      *std::get<std::string*>(field) =
          node.IsNull() ? "" : scalar_of(key, node, loc, expected(key));
      return;
    case Kind::AutoInt:
      *std::get<int*>(field) = node.IsScalar() && node.Scalar() == "auto"
                                   ? 0
                                   : decode_int(key, node, loc, expected(key), "auto or ");
      return;
    case Kind::AutoDouble:
      *std::get<double*>(field) = node.IsScalar() && node.Scalar() == "auto"
                                      ? 0.0
                                      : decode_double(key, node, loc, expected(key), "auto or ");
      return;
    case Kind::DoublePair:
      *std::get<std::array<double, 2>*>(field) = decode_pair(key, node, loc);
      return;
    case Kind::StepWindow:
      *std::get<std::vector<int>*>(field) = decode_window(key, node, loc);
      return;
  }
}

void encode(const KeySpec& key, const Config& cfg, YAML::Emitter& out) {
  // The field getter needs a mutable Config; nothing here writes through it.
  FieldRef field = key.field(const_cast<Config&>(cfg));
  switch (key.kind) {
    case Kind::Int:
      out << *std::get<int*>(field);
      return;
    case Kind::Uint64:
      out << *std::get<uint64_t*>(field);
      return;
    case Kind::Double:
      out << format_double(*std::get<double*>(field));
      return;
    case Kind::Bool:
      out << *std::get<bool*>(field);
      return;
    case Kind::String:
    case Kind::Enum:
      emit_string(out, *std::get<std::string*>(field));
      return;
    case Kind::NullablePath: {
      const std::string& s = *std::get<std::string*>(field);
      if (s.empty()) {
        out << YAML::Null;
      } else {
        emit_string(out, s);
      }
      return;
    }
    case Kind::AutoInt: {
      int v = *std::get<int*>(field);
      if (v == 0) {
        out << "auto";
      } else {
        out << v;
      }
      return;
    }
    case Kind::AutoDouble: {
      double v = *std::get<double*>(field);
      out << (v == 0.0 ? std::string("auto") : format_double(v));
      return;
    }
    case Kind::DoublePair: {
      const auto& pair = *std::get<std::array<double, 2>*>(field);
      out << YAML::Flow << YAML::BeginSeq << format_double(pair[0]) << format_double(pair[1])
          << YAML::EndSeq;
      return;
    }
    case Kind::StepWindow:
      out << YAML::Flow << YAML::BeginSeq;
      for (int v : *std::get<std::vector<int>*>(field)) out << v;
      out << YAML::EndSeq;
      return;
  }
}

std::string encode_inline(const KeySpec& key, const Config& cfg) {
  YAML::Emitter out;
  out.SetNullFormat(YAML::LowerNull);
  encode(key, cfg, out);
  return out.c_str();
}

std::string type_name(const KeySpec& key) {
  switch (key.kind) {
    case Kind::Int:
      return "int";
    case Kind::Uint64:
      return "uint64";
    case Kind::Double:
      return "float";
    case Kind::Bool:
      return "bool";
    case Kind::String:
      return "string";
    case Kind::Enum:
      return "enum";
    case Kind::NullablePath:
      return "path or null";
    case Kind::AutoInt:
      return "auto or int";
    case Kind::AutoDouble:
      return "auto or float";
    case Kind::DoublePair:
      return "[float, float]";
    case Kind::StepWindow:
      return "[int, int] or []";
  }
  return "";
}

std::string range_summary(const KeySpec& key) {
  switch (key.kind) {
    case Kind::Enum:
      return join(key.choices, ", ");
    case Kind::DoublePair:
      return "each " + key.range.describe();
    case Kind::StepWindow:
      return "0 < first <= last";
    case Kind::String:
      return "non-empty";
    default:
      return key.range.describe();
  }
}

std::string format_double(double v) {
  std::string s = number_text(v);  // the shortest text that from_chars reads back exactly
  if (!std::isfinite(v) || s.find('.') != std::string::npos) return s;
  // YAML 1.1 readers want a dot in a float: "25" -> "25.0", "1e-08" -> "1.0e-08".
  s.insert(std::min(s.find_first_of("eE"), s.size()), ".0");
  return s;
}

std::string_view nearest(std::string_view word, const std::vector<std::string_view>& candidates) {
  // Edit distance counting an adjacent swap as one edit ("trian" -> "train").
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.size()][b.size()];
  };
  // Close enough: a few edits for the word's length, or one name a prefix of the other
  // ("warmup" -> "warmup_steps").
  size_t max_edits = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3));
  std::string_view best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (std::string_view c : candidates) {
    size_t d = distance(word, c);
    bool prefix =
        std::min(word.size(), c.size()) >= 3 && (c.starts_with(word) || word.starts_with(c));
    if ((d <= max_edits || prefix) && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

}  // namespace ringstep::config_schema
