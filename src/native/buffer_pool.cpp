// The free list of reusable output buffers (buffer_pool.hpp).
#include "buffer_pool.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace cntkio::pool {
namespace {

constexpr size_t kGranule = size_t{64} << 10;
constexpr size_t kSlab = size_t{32} << 20;
constexpr size_t kLargestSlabBlock = size_t{8} << 20;

std::mutex mutex;
std::unordered_map<size_t, std::vector<void*>> resident;  // free blocks whose pages are mapped, by rounded size
std::unordered_map<size_t, std::vector<void*>> released;  // free slab blocks whose pages were given back
size_t pooled = 0;                                         // bytes in `resident`
uint8_t* slab_next = nullptr;                              // the unused rest of the current slab
size_t slab_left = 0;

size_t rounded(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

// A fresh mapping of `bytes` (its pages are mapped by the kernel when first written).
uint8_t* map_fresh(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);
}

void* pop(std::unordered_map<size_t, std::vector<void*>>& lists, size_t size) {
  auto found = lists.find(size);
  if (found == lists.end() || found->second.empty()) return nullptr;
  void* block = found->second.back();
  found->second.pop_back();
  return block;
}

}  // namespace

void* take(size_t bytes) {
  const size_t size = rounded(bytes ? bytes : 1);
  std::lock_guard<std::mutex> lock(mutex);
  if (void* block = pop(resident, size)) {
    pooled -= size;
    return block;
  }
  if (size > kLargestSlabBlock) return map_fresh(size);
  if (void* block = pop(released, size)) return block;
  if (slab_left < size) {  // the rest of the slab (less than one block) stays unused
    slab_next = map_fresh(kSlab);
    slab_left = kSlab;
  }
  void* block = slab_next;
  slab_next += size;
  slab_left -= size;
  return block;
}

void give(void* block, size_t bytes) noexcept {
  const size_t size = rounded(bytes ? bytes : 1);
  std::lock_guard<std::mutex> lock(mutex);
  try {
    if (pooled + size <= kMaxPooledBytes) {
      resident[size].push_back(block);
      pooled += size;
      return;
    }
    if (size <= kLargestSlabBlock) {
      released[size].reserve(released[size].size() + 1);  // may throw: then the block is simply lost below
      madvise(block, size, MADV_DONTNEED);
      released[size].push_back(block);
      return;
    }
  } catch (...) {  // no memory for the list: a slab block's pages are given back, its addresses lost
    if (size <= kLargestSlabBlock) madvise(block, size, MADV_DONTNEED);
    else munmap(block, size);
    return;
  }
  munmap(block, size);
}

}  // namespace cntkio::pool
