// The activation arena: one bump allocator over a block reserved at start. Forward
// allocates each saved activation from it; backward frees back to a mark. It records the
// current and peak bytes in use, which is what `mem_bytes.activations_peak` reports.
// Not thread-safe: one arena per training thread.
#pragma once

#include <cstddef>

namespace ringstep {

class Arena {
 public:
  explicit Arena(size_t capacity_bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // 64-byte aligned; throws std::length_error naming the request when the arena is full.
  float* alloc_floats(size_t n);
  void* alloc_bytes(size_t bytes);
  size_t mark() const { return used_; }
  void release_to(size_t mark) { used_ = mark; }
  void reset() { used_ = 0; }

  size_t used_bytes() const { return used_; }
  size_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = used_; }
  size_t capacity_bytes() const { return capacity_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
};

}  // namespace ringstep
