// Names of enum values. Each enum E has one table of (value, name) pairs, declared next to
// it as `constexpr auto enum_names(E)` and found by argument-dependent lookup. The config
// schema parses, suggests, writes and documents values with it; logs print name(v);
// command lines parse with parse_name<E>. Table order is the order messages list names in.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace ringstep {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  enum_names(e);
};

// V's name ("bf16"); "?" for a value outside the table.
template <NamedEnum E>
const char* name(E v) {
  for (const EnumName<E>& n : enum_names(v)) {
    if (n.value == v) return n.name;
  }
  return "?";
}

// The value named exactly TEXT, if any.
template <NamedEnum E>
std::optional<E> find_name(std::string_view text) {
  for (const EnumName<E>& n : enum_names(E{})) {
    if (text == n.name) return n.value;
  }
  return std::nullopt;
}

// Every name of E in table order, joined by ", " ("ring, native").
template <NamedEnum E>
std::string names_of() {
  std::string out;
  for (const EnumName<E>& n : enum_names(E{}))
    out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

// The value named TEXT; otherwise throws InputError("unknown WHAT 'TEXT'; expected one of
// a, b").
template <NamedEnum E>
E parse_name(std::string_view text, std::string_view what) {
  if (std::optional<E> v = find_name<E>(text)) return *v;
  throw InputError("unknown " + std::string(what) + " '" + std::string(text) +
                   "'; expected one of " + names_of<E>());
}

}  // namespace ringstep
