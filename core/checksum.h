// Byte checksums for "are these bits identical?" questions (replica checks, golden tests).
#pragma once

#include <xxhash.h>

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

// XXH3, 64 bits (the xxHash library): the checksum of large files (checkpoints). It reads
// tens of GB/s where fnv1a64's byte-serial chain manages well under one.
inline uint64_t xxh3_64(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace ringstep
