// Output buffers reused across chunks: a chunk's arrays go back to a small free list when NumPy frees them, so the
// next chunk of the same size writes into memory that is already mapped (no page faults, no zeroing by the kernel).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cntkio::pool {

// `bytes` of uninitialised memory, from the free list when a block of that size is there.
void* take(size_t bytes);
// Gives a block back (kept while the free list holds at most `kMaxPooledBytes`, else freed).
void give(void* block, size_t bytes) noexcept;

constexpr size_t kMaxPooledBytes = size_t{256} << 20;

}  // namespace cntkio::pool
