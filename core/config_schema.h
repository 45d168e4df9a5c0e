// The config schema: one row per key (dotted path, codec, one-line doc). Parsing, range
// checks, the refusal of what is not built yet, config_keys(), config_to_yaml() and the key
// reference in docs/configs.md all read this one table. Internal to core/config*.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace ringstep::config_schema {

// A value that does not fit its key: MSG ("'train.lr' must be > 0, got 0") and the position
// of the offending node, which the reader turns into "FILE:LINE:COL" or "--set KEY".
struct NodeError {
  YAML::Mark mark;
  std::string msg;
};

struct KeySpec {
  std::string_view path;  // "precision.loss_scale.mode"
  std::string type;       // for the docs: "int", "auto or float", "enum", ...
  std::string range;      // for the docs: ">= 1", "mpi, nccl (not built yet)"; "" = any
  std::string def;        // the default as one line of YAML ("0.003", "[5, 7]", "null")
  std::string_view doc;
  // Reads NODE into this key's field of CFG, checking type and range and refusing a value
  // that is not built yet. Throws NodeError.
  std::function<void(const YAML::Node& node, Config& cfg)> decode;
  // Writes the field as a YAML value that decode reads back to the same value.
  std::function<void(const Config& cfg, YAML::Emitter& out)> encode;
  // An action of one command, not a property of the experiment (run.overwrite): read only
  // from --set, refused in a file, never written by config_to_yaml, so that re-running a
  // saved config never repeats it.
  bool action = false;
};

// Every key, sections in the order of Config's members; one section's keys are contiguous.
const std::vector<KeySpec>& schema();
const KeySpec* find_key(std::string_view path);

// What a node is, for "got ..." in messages: "'text'", "a list", "a map" or "null".
std::string describe_node(const YAML::Node& node);
// The shortest text that reads back to exactly V, in YAML 1.1 float syntax ("1.0e-08").
std::string format_double(double v);
// The candidate nearest to WORD by edit distance, or "" when none is close enough.
std::string_view nearest(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace ringstep::config_schema
