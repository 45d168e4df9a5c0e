// Large, zeroed, aligned allocations for the flat buffers and the activation arena. Blocks
// of 2 MiB or more are 2 MiB-aligned and advised as transparent huge pages (Linux
// MADV_HUGEPAGE: it matters where the THP mode is `madvise`), which saves the GEMMs' TLB misses
// on 40-200 MiB buffers. Free with release_buffer.
#pragma once

#include <cstddef>

namespace ringstep {

void* allocate_buffer(size_t bytes);  // zeroed; throws std::bad_alloc
void release_buffer(void* p);

}  // namespace ringstep
