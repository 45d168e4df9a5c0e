#include "optim/compress_choice.h"

#include <algorithm>
#include <cstdio>

namespace ringstep {

double CompressChoice::compressed_exposed_ms() const {
  const double in_flight = sent_bytes > 0 ? comm_ms * sign_bytes / sent_bytes : 0.0;
  return std::max(0.0, in_flight - (comm_ms - exposed_ms));
}

std::string CompressChoice::describe() const {
  char line[400];
  std::snprintf(line, sizeof line,
                "1-bit Adam (compress: auto): %s from step %lld: the fp32 AllReduce left %.1f ms "
                "a step exposed; coding costs %.1f ms and the 1-bit exchange (1/%.0f of the "
                "bytes) would leave %.1f ms exposed",
                compress() ? "compressing" : "not compressing (AdamW goes on)",
                static_cast<long long>(from_step), exposed_ms, code_ms,
                sign_bytes > 0 ? sent_bytes / sign_bytes : 0.0, compressed_exposed_ms());
  return line;
}

}  // namespace ringstep
