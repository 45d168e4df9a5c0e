// The activation arena: one bump allocator over a block reserved at start. Forward
// allocates each saved activation from it; backward frees back to a mark. It records the
// current and peak bytes in use, which is what `mem_bytes.activations_peak` reports.
// Not thread-safe: one arena per training thread.
//
// A counting arena (make_counting) reserves nothing: it hands out addresses that must never
// be dereferenced and tracks used and peak bytes exactly as a real arena would for the same
// calls. Ops that see a counting arena make their allocations and skip their compute, so
// one dry pass of forward + backward measures the capacity a real arena needs.
#pragma once

#include <cstddef>

#include "core/runtime.h"

namespace ringstep {

class Arena {
 public:
  // CAPACITY_BYTES (rounded up to 64) on DEVICE: one allocation of its runtime
  // (InputError where runtime() refuses it).
  explicit Arena(size_t capacity_bytes, Device device = Device::cpu);
  // An arena of unlimited capacity that allocates no memory (see the top of this file).
  static Arena make_counting() { return Arena(); }
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // 64-byte aligned; throws std::length_error naming the request when the arena is full.
  // A counting arena's addresses are non-null, distinct and aligned, but point nowhere.
  float* alloc_floats(size_t n);
  void* alloc_bytes(size_t bytes);
  size_t mark() const { return used_; }
  void release_to(size_t mark) { used_ = mark; }
  void reset() { used_ = 0; }

  bool counting() const { return counting_; }
  // A counting arena's is the host's.
  Device device() const { return rt_->device(); }
  size_t used_bytes() const { return used_; }
  size_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = used_; }
  size_t capacity_bytes() const { return capacity_; }  // SIZE_MAX when counting

 private:
  Arena();  // counting

  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  Runtime* rt_;
  bool counting_ = false;
};

// Releases everything allocated from ARENA during its lifetime (an op's scratch).
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ArenaScope() { arena_.release_to(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

}  // namespace ringstep
