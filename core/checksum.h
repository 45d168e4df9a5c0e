// Byte checksums for "are these bits identical?" questions (replica checks, golden tests).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ringstep {

// FNV-1a, 64 bits, over SIZE bytes at DATA: any flipped bit changes it. Not cryptographic.
inline uint64_t fnv1a64(const void* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

}  // namespace ringstep
