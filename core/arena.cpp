#include "core/arena.h"

#include <cstdint>
#include <stdexcept>
#include <string>


namespace ringstep {
namespace {

// A counting arena's addresses start here: non-canonical on x86-64, so a dereference by
// mistake faults at once instead of reading some other buffer.
constexpr uintptr_t kCountingBase = uintptr_t{1} << 63;

}  // namespace

Arena::Arena(size_t capacity_bytes, Device device)
    : capacity_((capacity_bytes + 63) / 64 * 64), rt_(&runtime(device, "activation arena")) {
  base_ = static_cast<char*>(rt_->alloc(capacity_));
}

Arena::Arena() : capacity_(SIZE_MAX), rt_(&runtime(Device::cpu)), counting_(true) {}

Arena::~Arena() { rt_->free(base_); }

void* Arena::alloc_bytes(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded > capacity_ - used_)
    throw std::length_error("activation arena full: " + std::to_string(bytes) +
                            " bytes requested, " + std::to_string(capacity_ - used_) + " of " +
                            std::to_string(capacity_) + " free");
  void* p = counting_ ? reinterpret_cast<void*>(kCountingBase + used_) : base_ + used_;
  used_ += rounded;
  if (used_ > peak_) peak_ = used_;
  return p;
}

float* Arena::alloc_floats(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }

}  // namespace ringstep
