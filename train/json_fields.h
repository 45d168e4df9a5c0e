// The run's JSON files (steps.jsonl's records, summary.json) as field lists. Each struct
// that ringstep writes and reads back lists its fields once, in `fields(io, s)`, calling
// io(name, member, spec) per field; JsonWriter walks that list to write, JsonReader to read
// and check. A reader error is an InputError that names the file (and line), the field's
// dotted path and what is wrong with it: missing, null, wrong type, out of range, unknown.
// Numbers are written with the fewest digits that read back to the value (std::to_chars),
// so a value rounded to 3 decimals is written with at most 3.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"

namespace ringstep {

using ojson = nlohmann::ordered_json;

// How a field's "none" (NaN, std::nullopt, Int::none_value) appears in the file.
enum class NoneAs {
  never,    // the field always has a value: null is an error
  null,     // written as null
  omitted,  // the key is left out; an absent key reads as none
};

// A double in [lo, hi], finite unless none. Written rounded to DECIMALS (-1: as is).
struct Num {
  double lo = 0, hi = std::numeric_limits<double>::max();
  int decimals = -1;
  NoneAs none = NoneAs::never;
  bool added_later = false;  // absent in files written before the field existed: the default
};
// An integer in [lo, hi]; NONE stands for "none" when none != never.
struct Int {
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
  NoneAs none = NoneAs::never;
  int64_t none_value = -1;
  bool added_later = false;
};
// Anything else: a bool, an enum's name, a string, a nested object, a list.
struct Any {
  NoneAs none = NoneAs::never;
  bool added_later = false;
};

// Rounds X to DECIMALS decimals as the nearest double to the decimal, which to_chars then
// writes with at most DECIMALS decimals (dividing by 10^d; multiplying by 10^-d would not).
double round_decimals(double x, int decimals);

// J as JSON text, numbers in their shortest form (non-finite ones as null); INDENT < 0:
// one line, else pretty-printed with that many spaces.
std::string dump_json(const ojson& j, int indent = -1);

// What a reader knows of where it is: "run/steps.jsonl:12" and the dotted path of the value.
struct JsonPlace {
  std::string where;
  std::string path;  // "" for the file's top-level object

  JsonPlace at(const std::string& key) const {
    return {where, path.empty() ? key : path + "." + key};
  }
  // InputError "WHERE: field 'PATH' WHAT".
  [[noreturn]] void fail(const std::string& what) const;
};

// The value as a message shows it: its JSON text, cut to kExcerptBytes.
std::string shown(const nlohmann::json& j);

// --- Encoding one value (JsonWriter) ---------------------------------------------------

ojson encode(double v, const Num& spec);
template <class T>
requires std::is_integral_v<T> &&(!std::is_same_v<T, bool>)ojson encode(T v, const Int&) {
  return ojson(v);
}
inline ojson encode(bool v, const Any&) { return ojson(v); }
inline ojson encode(const std::string& v, const Any&) { return ojson(v); }
template <NamedEnum E>
ojson encode(E v, const Any&) {
  return ojson(name(v));
}
template <class T, class Spec>
ojson encode(const std::optional<T>& v, const Spec& spec) {
  return encode(*v, spec);
}

// --- Decoding one value (JsonReader) ---------------------------------------------------

void decode(const nlohmann::json& j, double& v, const Num& spec, const JsonPlace& at);
int64_t decode_integer(const nlohmann::json& j, const Int& spec, const JsonPlace& at);
template <class T>
requires std::is_integral_v<T> &&
    (!std::is_same_v<T, bool>)void decode(const nlohmann::json& j, T& v, const Int& spec,
                                          const JsonPlace& at) {
  v = T(decode_integer(j, spec, at));
}
void decode(const nlohmann::json& j, bool& v, const Any& spec, const JsonPlace& at);
void decode(const nlohmann::json& j, std::string& v, const Any& spec, const JsonPlace& at);
const std::string& string_at(const nlohmann::json& j, const JsonPlace& at);
template <NamedEnum E>
void decode(const nlohmann::json& j, E& v, const Any&, const JsonPlace& at) {
  const std::string& text = string_at(j, at);
  const std::optional<E> e = find_name<E>(text);
  if (!e) at.fail("is '" + excerpt(text) + "'; expected one of " + names_of<E>());
  v = *e;
}
template <class T, class Spec>
void decode(const nlohmann::json& j, std::optional<T>& v, const Spec& spec, const JsonPlace& at) {
  T x{};
  decode(j, x, spec, at);
  v = std::move(x);
}

// --- The two walkers -------------------------------------------------------------------

template <class T, class Spec>
bool is_none(const T& v, const Spec& spec) {
  if constexpr (std::is_same_v<T, double>)
    return !std::isfinite(v);
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return spec.none != NoneAs::never && int64_t(v) == spec.none_value;
  else if constexpr (requires { v.has_value(); })
    return !v.has_value();
  else
    return false;
}

template <class T, class Spec>
void set_none(T& v, const Spec& spec) {
  if constexpr (std::is_same_v<T, double>)
    v = std::numeric_limits<double>::quiet_NaN();
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    v = T(spec.none_value);
  else if constexpr (requires { v.reset(); })
    v.reset();
}

// Writes the fields that fields(w, s) lists into `out`, in list order.
class JsonWriter {
 public:
  template <class T, class Spec>
  void operator()(const char* name, const T& v, const Spec& spec) {
    if (is_none(v, spec) && spec.none == NoneAs::omitted) return;
    if (is_none(v, spec) && spec.none == NoneAs::null) {
      out[name] = nullptr;
      return;
    }
    out[name] = encode(v, spec);
  }
  ojson out = ojson::object();
};

// A nested struct is an object of its own fields (fields() never changes what the writer
// reads: the const_cast only lets one list serve both walkers).
template <class T>
requires requires(JsonWriter& w, T& s) { fields(w, s); }
ojson encode(const T& v, const Any&) {
  JsonWriter w;
  fields(w, const_cast<T&>(v));
  return w.out;
}

// Reads the fields that fields(r, s) lists from one JSON object, checking each; finish()
// then refuses a key that no field named.
class JsonReader {
 public:
  // Throws InputError unless J is an object. LEGACY: every field may be absent (a file
  // written before the format had a version).
  JsonReader(const nlohmann::json& j, JsonPlace place, bool legacy = false);

  template <class T, class Spec>
  void operator()(const char* name, T& v, const Spec& spec) {
    seen_.insert(name);
    const JsonPlace at = place_.at(name);
    const auto it = obj_.find(name);
    if (it == obj_.end()) {
      if (spec.none == NoneAs::omitted) set_none(v, spec);
      if (spec.none == NoneAs::omitted || spec.added_later || legacy_) return;
      if (missing_.empty()) missing_ = name;  // finish() reports it, with a misspelling seen
      return;
    }
    if (it->is_null()) {
      if (spec.none != NoneAs::null) at.fail("is null; it needs a value");
      set_none(v, spec);
      return;
    }
    decode(*it, v, spec, at);
  }
  // A key no field names that this object may hold anyway (read by hand).
  void allow(const char* name) { seen_.insert(name); }
  // Throws InputError for the first required field that was missing (naming a key that
  // looks like its misspelling) or else for a key that no field named.
  void finish() const;
  const nlohmann::json& object() const { return obj_; }

 private:
  const nlohmann::json& obj_;
  JsonPlace place_;
  bool legacy_;
  std::set<std::string> seen_;
  std::string missing_;  // the first required field that was absent
};

template <class T>
requires requires(JsonReader& r, T& s) { fields(r, s); }
void decode(const nlohmann::json& j, T& v, const Any&, const JsonPlace& at) {
  JsonReader r(j, at);
  fields(r, v);
  r.finish();
}

// A list of objects, each a struct with fields(): written in order, read and checked one by
// one (errors name the element: "network[1].interface").
template <class T>
requires requires(JsonWriter& w, T& s) { fields(w, s); }
ojson encode(const std::vector<T>& v, const Any& spec) {
  ojson list = ojson::array();
  for (const T& x : v) list.push_back(encode(x, spec));
  return list;
}
template <class T>
requires requires(JsonReader& r, T& s) { fields(r, s); }
void decode(const nlohmann::json& j, std::vector<T>& v, const Any& spec, const JsonPlace& at) {
  if (!j.is_array()) at.fail("must be a list, got " + shown(j));
  v.assign(j.size(), T{});
  for (size_t i = 0; i < j.size(); ++i)
    decode(j[i], v[i], spec, JsonPlace{at.where, at.path + "[" + std::to_string(i) + "]"});
}

// Collects the dotted names of the fields that fields(l, s) lists, nested ones included
// ("time_ms.step"): what the docs' tables must hold.
struct FieldNames {
  std::string prefix;
  std::vector<std::string>* out;

  template <class T, class Spec>
  void operator()(const char* name, T& v, const Spec&) {
    const std::string path = prefix + name;
    if constexpr (requires(FieldNames & l) { fields(l, v); }) {
      FieldNames sub{path + ".", out};
      fields(sub, v);
    } else {
      out->push_back(path);
    }
  }
};

}  // namespace ringstep
