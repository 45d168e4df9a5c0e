#include "core/error.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace ringstep {

std::string excerpt(std::string_view s) {
  std::string out;
  const size_t n = std::min(s.size(), kExcerptBytes);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

SystemFault io_fault(const std::string& action, const std::string& path, int err) {
  return SystemFault("cannot " + action + " '" + path + "': " + std::strerror(err));
}

std::string format_message(const char* format, ...) {
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n <= 0) return "";
  std::string out(size_t(n), '\0');
  va_start(args, format);
  std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

}  // namespace ringstep
