// Output buffers reused across chunks (the image deserializers' chunk arrays): a chunk's array goes back to a free
// list when NumPy frees it, so the next chunk of the same size writes into memory that is already mapped.
//
// Blocks are mapped by the pool itself rather than taken from malloc, whose thresholds and per-thread arenas make
// page reuse unpredictable (on the image bench, a 1000-image window of 600 KB chunks: 83 page faults per image from
// malloc, 54 from the pool, which is the first touch of the window's pages). Sizes are rounded up to 64 KiB;
// blocks up to 8 MiB are carved from 32 MiB slabs, larger ones get a mapping of their own. Free blocks beyond
// kMaxPooledBytes give their pages back to the system (a slab block keeps its addresses for a later block of its
// size, a large block is unmapped). Transparent huge pages are not asked for: where the kernel compacts memory for
// them on demand (defrag=madvise), the stalls cost more system time than the page faults they save (measured).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cntkio::pool {

// `bytes` of uninitialised memory, from the free list when a block of that size is there.
void* take(size_t bytes);
// Gives a block of `take(bytes)` back.
void give(void* block, size_t bytes) noexcept;

constexpr size_t kMaxPooledBytes = size_t{256} << 20;

}  // namespace cntkio::pool
