// Little-endian integers in byte buffers, as the file formats store them (token files,
// safetensors headers): the same bytes on every host.
#pragma once

#include <cstdint>

namespace ringstep {

// The BYTES-byte little-endian unsigned integer at P (BYTES <= 8).
inline uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Writes the low BYTES bytes of V at P, least significant first.
inline void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace ringstep
