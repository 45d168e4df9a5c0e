// Error types shared by every layer. InputError is a user's mistake (config, data file,
// checkpoint, flag): the command prints its message and exits with code 2. Anything else
// that escapes is an internal failure (exit 1).
#pragma once

#include <stdexcept>
#include <string>

namespace ringstep {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

constexpr int kExitBadInput = 2;

}  // namespace ringstep
