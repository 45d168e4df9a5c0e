// The schema table and the codecs that read, check, write and document each kind of value.
#include "core/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <ranges>
#include <type_traits>

#include "core/error.h"

namespace ringstep::config_schema {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string number_text(double v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string quoted(std::string_view s) { return "'" + excerpt(s) + "'"; }

// Closed or open numeric bounds; unbounded by default.
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;

  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // ">= 1", "> 0", "in [0, 1)"; "" when unbounded.
  std::string describe() const {
    if (std::isfinite(lo) && std::isfinite(hi)) {
      return std::string("in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
             (hi_open ? ")" : "]");
    }
    return std::isfinite(lo) ? (lo_open ? "> " : ">= ") + number_text(lo) : "";
  }
};

constexpr Range at_least(double lo) { return {lo, kInf, false, false}; }
constexpr Range above(double lo) { return {lo, kInf, true, false}; }
// in('(', 0, 1, ']') is (0, 1].
constexpr Range in(char open, double lo, double hi, char close) {
  return {lo, hi, open == '(', close == ')'};
}

// Parses the whole of S as a number (a leading '+' allowed); false on any leftover text.
template <class T>
bool parse_number(std::string_view s, T& out) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-') s.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// NODE as the user wrote it, for "got ...": "[7, 5]" for a list, else describe_node.
std::string got_text(const YAML::Node& node) {
  if (!node.IsSequence()) return describe_node(node);
  std::string out = "[";
  for (size_t i = 0; i < node.size(); ++i) {
    out +=
        (i ? ", " : "") + (node[i].IsScalar() ? excerpt(node[i].Scalar()) : describe_node(node[i]));
  }
  return out + "]";
}

// Quotes S when a YAML reader would take it for something other than a string (bool, null,
// number).
void emit_string(YAML::Emitter& out, const std::string& s) {
  static const std::vector<std::string_view> kWords = {
      "y",  "Y",    "yes",  "Yes",  "YES",   "n",     "N",     "no", "No",
      "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On",
      "ON", "off",  "Off",  "OFF",  "null",  "Null",  "NULL",  "~"};
  double d = 0;
  if (std::find(kWords.begin(), kWords.end(), s) != kWords.end() || parse_number(s, d) ||
      s.starts_with(".inf") || s.starts_with(".nan") || s.starts_with("-.inf") ||
      s.starts_with(".NaN") || s.starts_with(".Inf")) {
    out << YAML::DoubleQuoted;
  }
  out << s;
}

// Writes X as YAML that the key's codec reads back to X: floats with a dot, enums by name,
// "" as null, lists in flow style.
template <class T>
void write(YAML::Emitter& out, const T& x) {
  if constexpr (std::is_floating_point_v<T>) {
    out << format_double(x);
  } else if constexpr (NamedEnum<T>) {
    out << name(x);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (x.empty())
      out << YAML::Null;
    else
      emit_string(out, x);
  } else if constexpr (std::ranges::range<T>) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& e : x) write(out, e);
    out << YAML::EndSeq;
  } else {
    out << x;
  }
}

// One value being read: the key it is for and its node, for the messages.
struct Value {
  std::string_view path;
  YAML::Node node;

  // Throws "'KEY' must be WHAT, got GOT" at the node.
  [[noreturn]] void fail(const std::string& what, const std::string& got) const {
    throw NodeError{node.Mark(), "'" + std::string(path) + "' must be " + what + ", got " + got};
  }
  // The scalar's text; anything else fails with WHAT.
  std::string scalar(const std::string& what) const {
    if (!node.IsScalar()) fail(what, describe_node(node));
    return node.Scalar();
  }
  // The scalar's text where a number or a bool is expected. An explicit tag ("!!str 5")
  // says the value is something else, so it is refused rather than read past.
  std::string untagged_scalar(const std::string& what) const {
    std::string text = scalar(what);
    std::string tag = node.Tag();
    if (tag == "?" || tag == "!") return text;  // plain or quoted: no explicit tag
    if (constexpr std::string_view kCore = "tag:yaml.org,2002:"; tag.starts_with(kCore)) {
      tag = "!!" + tag.substr(kCore.size());
    }
    fail(what, quoted(text) + " with the tag " + tag);
  }
  Value item(size_t i) const { return {path, node[i]}; }
};

// How one kind of value is read (checking type and range), written and documented.
template <class T>
struct Codec {
  std::string type;   // the docs' type column
  std::string range;  // the docs' range column; "" = any
  std::function<T(const Value&)> read;
  // What to use in place of a value this build refuses ; "" or null when it is built.
  std::function<std::string(const T&)> refuse = nullptr;
  bool zero_is_auto = false;  // 0 stands for the word auto

  void write(YAML::Emitter& out, const T& x) const {
    if constexpr (std::is_arithmetic_v<T>) {
      if (zero_is_auto && x == 0) {
        out << "auto";
        return;
      }
    }
    config_schema::write(out, x);
  }
};

// A number of type T (int: 32 bits; uint64_t; double: finite) in RANGE. WHAT is the phrase
// for a wrong type ("an integer"); PREFIX goes before the range's ("auto or >= 1").
template <class T>
T read_number(const Value& v, const Range& range, const std::string& what,
              const std::string& prefix = "") {
  std::string text = v.untagged_scalar(what);
  std::conditional_t<std::is_same_v<T, int>, long long, T> x = 0;
  if (!parse_number(text, x)) v.fail(what, quoted(text));
  if (!std::isfinite(double(x))) v.fail("finite", excerpt(text));
  if (!range.contains(double(x))) v.fail(prefix + range.describe(), excerpt(text));
  if (x != T(x)) v.fail("a 32-bit integer", excerpt(text));  // an int out of range
  return T(x);
}

// Each number type's name in the docs and phrase after "must be".
template <class T>
constexpr std::array<const char*, 2> kNumberWords = {"float", "a number"};
template <>
constexpr std::array<const char*, 2> kNumberWords<int> = {"int", "an integer"};
template <>
constexpr std::array<const char*, 2> kNumberWords<uint64_t> = {"uint64", "a non-negative integer"};

// A number of type T in RANGE; WITH_AUTO: or the word auto, stored as 0.
template <class T>
Codec<T> number(Range range = {}, bool with_auto = false) {
  const std::string pre = with_auto ? "auto or " : "", what = pre + kNumberWords<T>[1];
  return {pre + kNumberWords<T>[0], range.describe(),
          [=](const Value& v) {
            bool is_auto = with_auto && v.node.IsScalar() && v.node.Scalar() == "auto";
            return is_auto ? T(0) : read_number<T>(v, range, what, pre);
          },
          nullptr, with_auto};
}
constexpr bool kAuto = true;

Codec<bool> boolean() {
  return {"bool", "", [](const Value& v) {
            std::string text = v.untagged_scalar("true or false");
            bool x = false;
            if (!YAML::convert<bool>::decode(v.node, x)) v.fail("true or false", quoted(text));
            return x;
          }};
}

Codec<std::string> text() {
  return {"string", "non-empty", [](const Value& v) {
            std::string s = v.scalar("a non-empty string");
            if (s.empty()) v.fail("a non-empty string", "''");
            return s;
          }};
}

// A path, or YAML null (or "") for none, stored as "".
Codec<std::string> path_or_null() {
  return {"path or null", "",
          [](const Value& v) { return v.node.IsNull() ? "" : v.scalar("null or a path"); }};
}

Codec<std::array<double, 2>> pair(Range range) {
  const std::string what = "a list of 2 numbers", each = what + " each ";
  return {"[float, float]", "each " + range.describe(), [=](const Value& v) {
            if (!v.node.IsSequence() || v.node.size() != 2) v.fail(what, got_text(v.node));
            return std::array<double, 2>{read_number<double>(v.item(0), range, what, each),
                                         read_number<double>(v.item(1), range, what, each)};
          }};
}

// [first, last] (inclusive, 1-based) or [] for none.
Codec<std::vector<int>> step_window() {
  const std::string what = "[] or [first, last] with 0 < first <= last";
  return {"[int, int] or []", "0 < first <= last", [=](const Value& v) {
            const YAML::Node& n = v.node;
            if (!n.IsSequence() || (n.size() != 0 && n.size() != 2)) v.fail(what, got_text(n));
            std::vector<int> w;
            for (size_t i = 0; i < n.size(); ++i)
              w.push_back(read_number<int>(v.item(i), {}, what));
            if (!w.empty() && !(0 < w[0] && w[0] <= w[1])) v.fail(what, got_text(n));
            return w;
          }};
}

// One of E's names (its enum_names table). The values in NOT_BUILT are refused at load.
template <NamedEnum E>
Codec<E> choice(std::vector<E> not_built = {}) {
  const std::string what = "one of " + names_of<E>();
  auto off = [=](E x) {
    return std::find(not_built.begin(), not_built.end(), x) != not_built.end();
  };
  std::vector<std::string_view> names;
  std::string doc, built;
  for (const EnumName<E>& n : enum_names(E{})) {
    names.push_back(n.name);
    doc +=
        (doc.empty() ? "" : ", ") + std::string(n.name) + (off(n.value) ? " (not built yet)" : "");
    if (!off(n.value)) built += (built.empty() ? "" : " or ") + std::string(n.name);
  }
  return {"enum", doc,
          [=](const Value& v) {
            std::string s = v.scalar(what);
            if (std::optional<E> x = find_name<E>(s)) return *x;
            std::string_view hint = nearest(s, names);
            v.fail(what, quoted(s) + (hint.empty() ? "" : "; did you mean " + quoted(hint) + "?"));
          },
          [=](const E& x) { return off(x) ? built : ""; }};
}

// Built::no marks a key whose feature does not exist yet: any value but the default is
// refused at load, so that nothing is silently ignored.
enum class Built { yes, no };

// One row: GET(config) is the key's field, CODEC reads and writes it.
template <class T, class Get>
KeySpec key(std::string_view path, Get get, Codec<T> c, std::string_view doc,
            Built built = Built::yes) {
  static const Config kDefaults;
  YAML::Emitter def;
  def.SetNullFormat(YAML::LowerNull);
  c.write(def, get(kDefaults));
  const std::string def_text = def.c_str();
  if (built == Built::no) {
    c.refuse = [=](const T& x) { return x == get(kDefaults) ? "" : def_text + " (the default)"; };
    c.range += (c.range.empty() ? "" : "; ") + ("not built yet: only " + def_text);
  }
  auto decode = [path, get, c](const YAML::Node& node, Config& cfg) {
    T x = c.read(Value{path, node});
    if (std::string use = c.refuse ? c.refuse(x) : ""; !use.empty()) {
      throw NodeError{node.Mark(), "'" + std::string(path) + "': " + describe_node(node) +
                                       " is not implemented yet in this build; use " + use};
    }
    get(cfg) = std::move(x);
  };
  auto encode = [get, c](const Config& cfg, YAML::Emitter& out) { c.write(out, get(cfg)); };
  return {path, c.type, c.range, def_text, doc, decode, encode};
}

// KEY as an action (KeySpec::action).
KeySpec action(KeySpec k) {
  k.action = true;
  return k;
}

// A key's dotted path is the path of its field in Config.
#define KEY(member) \
#member, [](auto& c) -> auto& { return c.member; }

// clang-format off
const std::vector<KeySpec> kSchema = {
  key(KEY(run.name), text(), "run name, shown in logs and the summary"),
  key(KEY(run.out_dir), text(), "run directory: config.yaml, steps.jsonl, trace/, checkpoints/"),
  key(KEY(run.seed), number<uint64_t>(), "seed for weight init and data; same config, seed and world size give the same losses"),
  key(KEY(run.device), choice<Device>(), "where the model, its gradients and the optimizer state live and run; cuda: one GPU per rank, bf16 or fp32, AdamW, or 1-bit Adam with comm.backend nccl (docs/gpu.md); exit 2 where no CUDA device is usable"),
  key(KEY(run.threads), number<int>(at_least(1), kAuto), "CPU threads per rank; auto = cores / ranks on this node"),
  action(key(KEY(run.overwrite), boolean(), "command line only (`--set run.overwrite=true`), never saved: start afresh in an out_dir that holds an earlier run, deleting everything that run wrote (docs/design.md, the run directory); false = refuse unless resuming")),
  key(KEY(run.memory_limit_mb), number<double>(at_least(0)), "memory one rank may use, in MiB, that `ringstep report` judges the activation peak against (an accelerator's memory, a cgroup limit); 0 = physical RAM / ranks on the node"),

  key(KEY(model.vocab_size), number<int>(in('[', 2, 65536, ']')), "vocabulary size (tokens are uint16 on disk)"),
  key(KEY(model.seq_len), number<int>(at_least(1)), "context length T in tokens"),
  key(KEY(model.d_model), number<int>(at_least(1)), "hidden width C; must be divisible by n_heads"),
  key(KEY(model.n_layers), number<int>(in('[', 1, 65536, ']')), "number of Transformer blocks L (the largest published models have about 100)"),
  key(KEY(model.n_heads), number<int>(at_least(1)), "attention heads per block"),
  key(KEY(model.pad_vocab_to_multiple), number<int>(in('[', 1, 4096, ']')), "embedding and logit rows rounded up to a multiple of this (Megatron's make-vocab-size-divisible-by): 128 makes GPT-2's 50257 rows 50304, products a GPU runs at full speed; the padded logits are masked out of the softmax, so their rows (zero at init) get no gradient, and an export leaves them out; 1 = none"),

  key(KEY(data.source), choice<DataSourceKind>(), "synthetic = seeded Markov source with a known entropy floor; file = token file"),
  key(KEY(data.path), path_or_null(), "token file (`ringstep prepare`'s or an llm.c shard), or a glob of them read in sorted order as one stream (docs/data.md); required when source is file"),
  key(KEY(data.val_path), path_or_null(), "held-out token file or glob, as path; null = the tail of path"),
  key(KEY(data.shuffle), boolean(), "token files: read each rank's training windows in a new order every epoch, seeded by run.seed; false = file order"),
  key(KEY(data.format), choice<DataFormat>(), "token files' layout (docs/formats.md): auto = each file's by its magic; ringstep = `ringstep prepare`'s; llmc = llm.c's dev/data shards (GPT-2 uint16 tokens)"),

  key(KEY(train.steps), number<int>(at_least(1)), "optimizer steps"),
  key(KEY(train.micro_batch), number<int>(at_least(1)), "sequences per rank per forward/backward"),
  key(KEY(train.grad_accum_steps), number<int>(at_least(1)), "micro-batches accumulated per optimizer step"),
  key(KEY(train.global_batch), number<int>(at_least(0)), "0 = derived; else must equal micro_batch x grad_accum_steps x world_size"),
  key(KEY(train.lr), number<double>(above(0)), "peak learning rate"),
  key(KEY(train.min_lr_ratio), number<double>(in('[', 0, 1, ']')), "final lr = lr x min_lr_ratio (cosine, linear)"),
  key(KEY(train.warmup_steps), number<int>(at_least(0)), "linear warmup from 0 to lr; may exceed steps"),
  key(KEY(train.schedule), choice<LrScheduleKind>(), "lr decay after warmup"),
  key(KEY(train.weight_decay), number<double>(at_least(0)), "decoupled (AdamW) weight decay on matrices"),
  key(KEY(train.grad_clip), number<double>(at_least(0)), "clip the global gradient norm to this; 0 = off"),
  key(KEY(train.eval_every), number<int>(at_least(0)), "validation loss every N steps; 0 = only at the end"),
  key(KEY(train.eval_batches), number<int>(at_least(1)), "micro-batches per validation pass"),
  key(KEY(train.check_replicas_every), number<int>(at_least(0)), "check every N steps that all ranks hold identical weights; 0 = never"),
  key(KEY(train.init_from), path_or_null(), "start from these weights (a checkpoint, a run directory's newest checkpoint or a .safetensors file from `ringstep export`); optimizer state starts afresh; ignored when resuming"),
  key(KEY(train.on_nan), choice<OnNan>(), "an inf/NaN loss or gradient with no loss scaling (fp32, bf16, mode none): stop the run naming the step and rank, or skip the step"),

  key(KEY(precision.dtype), choice<DType>(), "activation and matmul-input dtype; master weights stay fp32"),
  key(KEY(precision.tf32), boolean(), "cuda, fp32: let matrix products use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation); false = true fp32"),
  key(KEY(precision.loss_scale.mode), choice<LossScaleMode>(), "loss scaling; auto = dynamic for fp16, none for bf16 and fp32 (they have fp32's exponent range); see docs/precision.md"),
  key(KEY(precision.loss_scale.initial), number<double>(in('(', 0, kMaxLossScale, ']')), "starting scale (the scale for static); at most 2^24, see docs/precision.md"),
  key(KEY(precision.loss_scale.growth_factor), number<double>(above(1)), "scale *= this after growth_interval clean steps in a row (never above 2^24)"),
  key(KEY(precision.loss_scale.backoff_factor), number<double>(in('(', 0, 1, ')')), "scale *= this on an overflow once hysteresis has run out (never below min_scale)"),
  key(KEY(precision.loss_scale.growth_interval), number<int>(at_least(1)), "clean steps in a row before the scale grows"),
  key(KEY(precision.loss_scale.hysteresis), number<int>(at_least(1)), "overflows before the first backoff; re-armed only when the scale grows"),
  key(KEY(precision.loss_scale.min_scale), number<double>(in('(', 0, kMaxLossScale, ']')), "floor for the scale; must be <= initial"),
  key(KEY(precision.loss_scale.max_consecutive_skips), number<int>(at_least(1)), "stop the run after this many skipped (inf/NaN) steps in a row, in every mode"),

  key(KEY(recompute.policy), choice<RecomputePolicy>(), "activation recomputation: none, every block, every k-th block, attention only"),
  key(KEY(recompute.k), number<int>(at_least(1)), "for every_k: recompute blocks whose index is a multiple of k"),

  key(KEY(optimizer.name), choice<OptimizerKind>(), "adamw; 1-bit Adam: AdamW for freeze_step steps, then 1-bit compressed momentum exchange; 0/1 Adam: variance updated at growing intervals, then frozen, 1-bit syncs with local steps between them (docs/optim.md)"),
  key(KEY(optimizer.betas), pair(in('[', 0, 1, ')')), "Adam beta1, beta2"),
  key(KEY(optimizer.eps), number<double>(above(0)), "Adam epsilon"),
  key(KEY(optimizer.onebit.freeze_step), number<int>(at_least(1)), "1-bit Adam: AdamW steps on averaged gradients before the variance freezes (DeepSpeed advises 15-25% of train.steps)"),
  key(KEY(optimizer.onebit.scale), choice<OneBitScale>(), "1-bit Adam: scale of the sign code, one per scale block per message; mean_abs = mean absolute value (least L2 error, the default), l2 = L2 norm / sqrt(n) (DeepSpeed)"),
  key(KEY(optimizer.onebit.scale_block), number<int>(at_least(0)), "1-bit Adam: elements that share one scale, in blocks from each tensor's start; 0 = one scale per tensor. Each block costs 32 bits per message: 32/scale_block bits per element on top of the 1-bit code"),
  key(KEY(optimizer.onebit.overlap), boolean(), "1-bit Adam: start each bucket's compressed exchange during backward, as AdamW's buckets are (with comm.overlap); the clip coefficient is then the previous step's (this step's norm is known only after backward), and a skipped step (loss scaling, on_nan: skip) puts the momentum and both error buffers back. false = exchange after backward, clipped by this step's norm"),
  key(KEY(optimizer.onebit.compress), choice<OneBitCompress>(), "1-bit Adam: compress after the warm-up always, never (AdamW throughout), or auto: from the warm-up's measured exposed AllReduce time against the measured cost of coding (and the compressed exchange's predicted exposed time), compress only where that is less; the log says which way and why (docs/optim.md)"),
  key(KEY(optimizer.zero_one.var_freeze_step), number<int>(at_least(1)), "0/1 Adam: the last step that may update the variance (on fp32 averaged gradients); later steps keep it frozen and may be local (DeepSpeed: the end of the LR warm-up)"),
  key(KEY(optimizer.zero_one.var_update_scaler), number<int>(at_least(1)), "0/1 Adam: variance updates at one interval before the interval doubles (the paper's kappa); steps between them are 1-bit syncs"),
  key(KEY(optimizer.zero_one.local_step_scaler), number<int>(at_least(1)), "0/1 Adam: steps after the freeze at one sync interval before the interval doubles"),
  key(KEY(optimizer.zero_one.local_step_clipper), number<int>(at_least(1)), "0/1 Adam: the longest sync interval after the freeze, in steps (the paper's H); the steps between syncs are local, with no exchange"),

  key(KEY(comm.backend), choice<CommBackend>(), "transport of the gradient buckets: mpi = the host's (on cuda, staged through pinned host memory); nccl = on the GPU, each bucket reduced on a communication stream as backward produces it (run.device cuda only; docs/comm.md)"),
  key(KEY(comm.allreduce), choice<AllreduceAlgo>(), "ring = ringstep's ring AllReduce; native = the library's"),
  key(KEY(comm.bucket_mb), number<double>(above(0)), "gradient bucket size in MiB"),
  key(KEY(comm.overlap), boolean(), "start each bucket's AllReduce during backward (on cuda each bucket is staged through pinned host memory as backward finishes it)"),
  key(KEY(comm.link.bandwidth_gbps), number<double>(at_least(0)), "emulated link bandwidth in Gbit/s; 0 = no emulation"),
  key(KEY(comm.link.latency_us), number<double>(at_least(0)), "emulated per-message latency in microseconds; 0 = none"),

  key(KEY(profile.enabled), boolean(), "time every step"),
  key(KEY(profile.log_every), number<int>(at_least(1)), "print a console line every N steps (steps.jsonl keeps every step; on cuda, and on one rank, the records of N steps are written together, when what the device timed and decided is read)"),
  key(KEY(profile.trace_steps), step_window(), "Chrome trace of steps first..last (inclusive); [] = none"),
  key(KEY(profile.peak_gflops), number<double>(above(0), kAuto), "peak GFLOP/s per rank for MFU; auto = measured at start on the CPU, the GPU's datasheet peak on cuda (docs/metrics.md)"),
  key(KEY(profile.op_every), number<int>(at_least(0)), "time every op of forward, backward and the optimizer on each N-th step and on the traced steps (steps.jsonl `ops`, the report's measured roofline); 0 = never; on cuda each op is timed with CUDA events and a timed step waits for the device at the end of each phase"),
  key(KEY(profile.inject_delay_ms), number<double>(at_least(0)), "test only: sleep this long in every step on the last rank, a straggler for the diagnosis gallery (docs/diagnosis.md); 0 = off"),
  key(KEY(profile.inject_data_delay_ms), number<double>(at_least(0)), "test only: sleep this long in every micro-batch's data phase, a slow input pipeline for the diagnosis gallery; 0 = off"),

  key(KEY(checkpoint.every), number<int>(at_least(0)), "save every N steps and at the end; 0 = never"),
  key(KEY(checkpoint.keep), number<int>(at_least(1)), "checkpoints kept (oldest deleted first)"),
  key(KEY(checkpoint.resume), text(), "auto = newest in out_dir/checkpoints that verifies, if any; never; or a checkpoint path"),
};
// clang-format on

#undef KEY

}  // namespace

std::string describe_node(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  return node.IsScalar() ? quoted(node.Scalar()) : "null";
}

const std::vector<KeySpec>& schema() { return kSchema; }

const KeySpec* find_key(std::string_view path) {
  auto it = std::find_if(kSchema.begin(), kSchema.end(),
                         [&](const KeySpec& key) { return key.path == path; });
  return it == kSchema.end() ? nullptr : &*it;
}

std::string format_double(double v) {
  std::string s = number_text(v);  // the shortest text that from_chars reads back exactly
  if (!std::isfinite(v) || s.find('.') != std::string::npos) return s;
  // YAML 1.1 readers want a dot in a float: "25" -> "25.0", "1e-08" -> "1.0e-08".
  s.insert(std::min(s.find_first_of("eE"), s.size()), ".0");
  return s;
}

// Edit distance counting an adjacent swap as one edit ("trian" -> "train"). Close enough: a
// few edits for the word's length, or one name a prefix of the other ("warmup" ->
// "warmup_steps").
std::string_view nearest(std::string_view word, const std::vector<std::string_view>& candidates) {
  if (word.size() > kExcerptBytes) return {};  // no name is that long; spare the quadratic work
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
  size_t max_edits = std::max<size_t>(1, std::min<size_t>(3, word.size() / 3)), best_d = SIZE_MAX;
  std::string_view best;
  for (std::string_view c : candidates) {
    size_t d = distance(word, c);
    bool prefix =
        std::min(word.size(), c.size()) >= 3 && (c.starts_with(word) || word.starts_with(c));
    if ((d <= max_edits || prefix) && d < best_d) std::tie(best, best_d) = std::pair(c, d);
  }
  return best;
}

}  // namespace ringstep::config_schema
