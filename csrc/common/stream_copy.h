// A copy larger than the caches, with non-temporal stores where the CPU has them: a plain copy
// reads every destination line into the cache before it overwrites it, a third more memory
// traffic, and evicts what the caches held.
#pragma once

#include <cstddef>

namespace pscore {

// Copies at least this large stream: a quarter of the last-level cache (8 MB where it is not
// known). Below that, sources and destinations of a collective's copies still fit the cache
// together and a destination in cache is worth keeping.
size_t stream_copy_bytes();

// memcpy's contract (no overlap), storing around the caches; ends with a store fence, so the
// bytes are visible to other threads ordered as a plain copy's would be.
void copy_streaming(void* dst, const void* src, size_t nbytes);

}  // namespace pscore
