#include "core/aligned_alloc.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace ringstep {

void* allocate_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded ? rounded : align);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  std::memset(p, 0, rounded ? rounded : align);
  return p;
}

void release_buffer(void* p) { std::free(p); }

}  // namespace ringstep
