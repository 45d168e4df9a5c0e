// The config schema: one row per key (dotted path, kind, field, range, one-line doc).
// Parsing, range checks, config_keys(), config_to_yaml() and the key reference in
// docs/configs.md are all driven by this one table. Internal to core/config*.cpp and tests.
#pragma once

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/config.h"

namespace ringstep::config_schema {

enum class Kind {
  Int,           // int, Range applies
  Uint64,        // uint64_t, any non-negative integer
  Double,        // double, finite, Range applies
  Bool,          // YAML true/false (also yes/no, on/off)
  String,        // non-empty string
  Enum,          // string, one of KeySpec::choices
  NullablePath,  // string; YAML null (or "") means ""
  AutoInt,       // int; "auto" means 0, else Range applies
  AutoDouble,    // double; "auto" means 0, else Range applies
  DoublePair,    // std::array<double, 2>; Range applies to each element
  StepWindow,    // std::vector<int>: [] or [first, last] with 0 < first <= last
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Closed or open numeric bounds; unbounded by default.
struct Range {
  double lo = -kInf;
  double hi = kInf;
  bool lo_open = false;
  bool hi_open = false;

  bool contains(double v) const;
  std::string describe() const;  // ">= 1", "> 0", "in [0, 1)"; "" when unbounded
};

using FieldRef = std::variant<int*, uint64_t*, double*, bool*, std::string*, std::array<double, 2>*,
                              std::vector<int>*>;

struct KeySpec {
  std::string_view path;  // "precision.loss_scale.mode"
  Kind kind;
  FieldRef (*field)(Config&);
  Range range;
  std::vector<std::string_view> choices;  // Kind::Enum only
  std::string_view doc;
};

// Says where a YAML node came from in error messages: "FILE:LINE:COL" (1-based) for a file,
// or a fixed label such as "--set train.lr" for an override.
struct Locator {
  std::string name;
  bool fixed = false;

  std::string at(const YAML::Mark& mark) const;
};

// Every key, sections in DESIGN.md order; the keys of one section are contiguous.
const std::vector<KeySpec>& schema();
const KeySpec* find_key(std::string_view path);

// Reads NODE into KEY's field of CFG, checking type and range. Throws InputError located
// by LOC at the offending node.
void decode(const KeySpec& key, const YAML::Node& node, Config& cfg, const Locator& loc);
// Writes KEY's field of CFG as a YAML value that decode reads back to the same value.
void encode(const KeySpec& key, const Config& cfg, YAML::Emitter& out);
// KEY's field as one line of YAML ("0.003", "[5, 7]", "null"), for docs and messages.
std::string encode_inline(const KeySpec& key, const Config& cfg);

std::string type_name(const KeySpec& key);      // "int", "float", "auto | int", ...
std::string range_summary(const KeySpec& key);  // ">= 1", "cosine, linear", ...

// What a node is, for "got ..." in messages: "'text'", "a list", "a map" or "null".
std::string describe_node(const YAML::Node& node);
// The shortest text that reads back to exactly V, in YAML 1.1 float syntax ("1.0e-08").
std::string format_double(double v);
// The candidate nearest to WORD by edit distance, or "" when none is close enough.
std::string_view nearest(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace ringstep::config_schema
