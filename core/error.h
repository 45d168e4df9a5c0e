// Error types shared by every layer. InputError is a user's mistake (config, data file,
// checkpoint, flag): the command prints its message and exits with code 2. Anything else
// that escapes is an internal failure (exit 1).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ringstep {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

constexpr int kExitBadInput = 2;

// A user's value as it may appear in a message: bytes outside printable ASCII as \xNN, and
// only the first kExcerptBytes of it followed by "... (N bytes)", so that a huge or binary
// value cannot flood a terminal.
constexpr size_t kExcerptBytes = 80;
std::string excerpt(std::string_view s);

}  // namespace ringstep
