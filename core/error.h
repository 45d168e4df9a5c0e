// Error types shared by every layer. InputError is a user's mistake (config, data file,
// checkpoint, flag): the command prints its message and exits with code 2. SystemFault is
// the machine's (a full disk, a directory made read-only, a file removed while a run is
// going): exit code 3. Anything else that escapes is an internal failure (exit 1).
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

class SystemFault : public std::runtime_error {
 public:
  explicit SystemFault(const std::string& what) : std::runtime_error(what) {}
};

constexpr int kExitSystemFault = 3;

// "cannot ACTION 'PATH': <strerror(ERR)>" as a SystemFault, e.g. cannot write
// 'runs/x/steps.jsonl': No space left on device.
SystemFault io_fault(const std::string& action, const std::string& path, int err);

// An error whose message one rank has already printed for every rank: the command exits
// with CODE and prints nothing more.
struct AlreadyReported {
  int code;
};

// A user's value as it may appear in a message: bytes outside printable ASCII as \xNN, and
// only the first kExcerptBytes of it followed by "... (N bytes)", so that a huge or binary
// value cannot flood a terminal.
constexpr size_t kExcerptBytes = 80;
std::string excerpt(std::string_view s);

// FORMAT and its arguments as printf writes them, at any length: for messages that print
// numbers ("%s: token %zu is %u").
[[gnu::format(printf, 1, 2)]] std::string format_message(const char* format, ...);

}  // namespace ringstep
