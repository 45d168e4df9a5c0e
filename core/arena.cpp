#include "core/arena.h"

#include "core/aligned_alloc.h"

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace ringstep {

Arena::Arena(size_t capacity_bytes) : capacity_((capacity_bytes + 63) / 64 * 64) {
  base_ = static_cast<char*>(allocate_buffer(capacity_));
}

Arena::~Arena() { release_buffer(base_); }

void* Arena::alloc_bytes(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (used_ + rounded > capacity_)
    throw std::length_error("activation arena full: " + std::to_string(bytes) +
                            " bytes requested, " + std::to_string(capacity_ - used_) +
                            " of " + std::to_string(capacity_) + " free");
  void* p = base_ + used_;
  used_ += rounded;
  if (used_ > peak_) peak_ = used_;
  return p;
}

float* Arena::alloc_floats(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }

}  // namespace ringstep
