// The activation arena and its counting mode. A counting arena sizes the real one
// (Gpt::count_arena_bytes), so for the same calls it must report the same used and peak
// bytes and lay its addresses out as a real arena does, while allocating nothing.
#include "core/arena.h"
#include "core/cuda/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/error.h"

namespace ringstep {
namespace {

struct Trace {
  std::vector<uintptr_t> offsets;  // of each allocation from the first
  std::vector<size_t> used;        // after each call
  size_t peak = 0;
};

// A forward/backward-like sequence: sizes that are not multiples of 64, a scope that
// releases its scratch, a release to a mark below the peak, allocations after it.
Trace Record(Arena& a) {
  Trace t;
  std::vector<uintptr_t> ptrs;
  auto note = [&](void* p) {
    ptrs.push_back(reinterpret_cast<uintptr_t>(p));
    t.used.push_back(a.used_bytes());
  };
  note(a.alloc_bytes(100));
  const size_t mark = a.mark();
  note(a.alloc_floats(33));
  {
    ArenaScope scope(a);
    note(a.alloc_bytes(4096));
    note(a.alloc_bytes(1));
  }
  t.used.push_back(a.used_bytes());
  note(a.alloc_bytes(0));
  a.release_to(mark);
  note(a.alloc_floats(7));
  for (uintptr_t p : ptrs) t.offsets.push_back(p - ptrs.front());
  t.peak = a.peak_bytes();
  return t;
}

TEST(Arena, CountingArenaMatchesARealOneCallForCall) {
  Arena real(1 << 16);
  Arena counter = Arena::make_counting();
  const Trace r = Record(real), c = Record(counter);
  EXPECT_EQ(c.offsets, r.offsets);
  EXPECT_EQ(c.used, r.used);
  EXPECT_EQ(c.peak, r.peak);
  // 128 + 192 + 4096 + 64: every request rounded up to 64 bytes.
  EXPECT_EQ(r.peak, 128u + 192u + 4096u + 64u);
  EXPECT_EQ(r.used[4], 128u + 192u) << "the scope released its two allocations";
  EXPECT_FALSE(real.counting());
  EXPECT_TRUE(counter.counting());
}

TEST(Arena, CountingAddressesAreDistinctAlignedAndNonNull) {
  Arena counter = Arena::make_counting();
  std::set<uintptr_t> seen;
  for (size_t bytes : {1, 64, 65, 1000, 3}) {
    const auto p = reinterpret_cast<uintptr_t>(counter.alloc_bytes(bytes));
    EXPECT_NE(p, 0u);
    EXPECT_EQ(p % 64, 0u);
    EXPECT_TRUE(seen.insert(p).second);
  }
}

TEST(Arena, CountingArenaNeverFillsButARealOneDoes) {
  Arena counter = Arena::make_counting();
  counter.alloc_bytes(size_t{1} << 50);  // a PiB: nothing is reserved
  EXPECT_EQ(counter.peak_bytes(), size_t{1} << 50);
  EXPECT_EQ(counter.capacity_bytes(), SIZE_MAX);
  Arena real(256);
  real.alloc_bytes(200);
  EXPECT_THROW(real.alloc_bytes(100), std::length_error);
  EXPECT_EQ(real.used_bytes(), 256u) << "a failed request leaves the arena as it was";
}

TEST(Arena, CudaMemoryIsAnInputErrorWithoutAGpu) {
  EXPECT_EQ(Arena(64).device(), Device::cpu);
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here";
  EXPECT_THROW(Arena(64, Device::cuda), InputError);
}

}  // namespace
}  // namespace ringstep
