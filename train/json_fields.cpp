#include "train/json_fields.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace ringstep {
namespace {

using json = nlohmann::json;

// The shortest text that reads back to X (std::to_chars guarantees it; nlohmann's Grisu2
// does not always find it: 0.893206 came out as 0.8932060000000001); in fixed notation
// unless the value is tiny or huge. ".0" keeps an integral value a float, as nlohmann
// writes it.
std::string number_text(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[400];
  const double a = std::fabs(x);
  const bool fixed = a == 0 || (a >= 1e-6 && a < 1e15);
  const auto [end, ec] = fixed ? std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed)
                               : std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

void dump_to(const ojson& j, int indent, int depth, std::string& out) {
  const auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  switch (j.type()) {
    case ojson::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [key, value] : j.items()) {
        if (!first) out += ',';
        first = false;
        newline(depth + 1);
        out += ojson(key).dump();
        out += indent < 0 ? ":" : ": ";
        dump_to(value, indent, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    case ojson::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i > 0) out += ',';
        newline(depth + 1);
        dump_to(j[i], indent, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case ojson::value_t::number_float:
      out += number_text(j.get<double>());
      return;
    default:  // null, bool, integers, strings (escaped; invalid UTF-8 replaced)
      out += j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

// Levenshtein distance: how many single-byte edits turn A into B.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string describe(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace

double round_decimals(double x, int decimals) {
  if (decimals < 0 || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, decimals);
  // Beyond 2^53 the scaled value has no fraction left to round.
  if (std::fabs(x) * scale >= 9007199254740992.0) return x;
  return std::round(x * scale) / scale;
}

std::string dump_json(const ojson& j, int indent) {
  std::string out;
  dump_to(j, indent, 0, out);
  return out;
}

void JsonPlace::fail(const std::string& what) const {
  throw InputError(where + ": field '" + path + "' " + what);
}

std::string shown(const json& j) {
  return excerpt(j.dump(-1, ' ', false, json::error_handler_t::replace));
}

ojson encode(double v, const Num& spec) { return ojson(round_decimals(v, spec.decimals)); }

void decode(const json& j, double& v, const Num& spec, const JsonPlace& at) {
  if (!j.is_number()) at.fail("must be a number, got " + shown(j));
  const double x = j.get<double>();
  if (x < spec.lo || x > spec.hi) {
    const bool no_lo = spec.lo == std::numeric_limits<double>::lowest(),
               no_hi = spec.hi == std::numeric_limits<double>::max();
    const std::string range = no_lo   ? "<= " + describe(spec.hi)
                              : no_hi ? ">= " + describe(spec.lo)
                                      : "in [" + describe(spec.lo) + ", " + describe(spec.hi) + "]";
    at.fail("must be " + range + ", got " + shown(j));
  }
  v = x;
}

int64_t decode_integer(const json& j, const Int& spec, const JsonPlace& at) {
  const std::string must = spec.lo == spec.hi ? "must be " + std::to_string(spec.lo)
                           : spec.hi < std::numeric_limits<int64_t>::max()
                               ? "must be an integer in [" + std::to_string(spec.lo) + ", " +
                                     std::to_string(spec.hi) + "]"
                               : "must be an integer >= " + std::to_string(spec.lo);
  // An integral float (2048.0: older records wrote tokens so) is accepted.
  if (!j.is_number() || (j.is_number_float() && j.get<double>() != std::floor(j.get<double>())))
    at.fail(must + ", got " + shown(j));
  // Compare as doubles first, so that no out-of-range value is ever converted.
  const double x = j.is_number_unsigned() ? double(j.get<uint64_t>()) : j.get<double>();
  if (x < double(spec.lo) || x > double(spec.hi) || x >= 9223372036854775808.0)
    at.fail(must + ", got " + shown(j));
  const int64_t n = j.is_number_float() ? int64_t(x) : j.get<int64_t>();
  if (n < spec.lo || n > spec.hi) at.fail(must + ", got " + shown(j));
  return n;
}

void decode(const json& j, bool& v, const Any&, const JsonPlace& at) {
  if (!j.is_boolean()) at.fail("must be true or false, got " + shown(j));
  v = j.get<bool>();
}

const std::string& string_at(const json& j, const JsonPlace& at) {
  if (!j.is_string()) at.fail("must be a string, got " + shown(j));
  return j.get_ref<const std::string&>();
}

void decode(const json& j, std::string& v, const Any&, const JsonPlace& at) {
  v = string_at(j, at);
}

JsonReader::JsonReader(const json& j, JsonPlace place, bool legacy)
    : obj_(j), place_(std::move(place)), legacy_(legacy) {
  if (!j.is_object()) {
    if (place_.path.empty())
      throw InputError(place_.where + ": expected a JSON object, got " + shown(j));
    place_.fail("must be an object, got " + shown(j));
  }
}

void JsonReader::finish() const {
  std::string unknown, near;
  for (const auto& [key, value] : obj_.items()) {
    if (seen_.count(key)) continue;
    if (unknown.empty()) unknown = key;
    if (!missing_.empty() &&
        edit_distance(key, missing_) <= std::max<size_t>(2, missing_.size() / 4))
      near = key;
  }
  if (!missing_.empty())
    place_.at(missing_).fail("is missing" +
                             (near.empty() ? "" : " (misspelt as '" + excerpt(near) + "'?)"));
  if (!unknown.empty())
    throw InputError(place_.where + ": unknown field '" + place_.at(excerpt(unknown)).path + "'");
}

}  // namespace ringstep
