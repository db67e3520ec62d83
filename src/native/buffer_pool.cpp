// The free list of reusable output buffers (buffer_pool.hpp).
#include "buffer_pool.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace cntkio::pool {
namespace {

std::mutex mutex;
std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by size
size_t pooled = 0;

}  // namespace

void* take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = free_blocks.find(bytes);
    if (found != free_blocks.end() && !found->second.empty()) {
      void* block = found->second.back();
      found->second.pop_back();
      pooled -= bytes;
      return block;
    }
  }
  void* block = std::malloc(bytes ? bytes : 1);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

void give(void* block, size_t bytes) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (pooled + bytes <= kMaxPooledBytes) {
      try {
        free_blocks[bytes].push_back(block);
        pooled += bytes;
        return;
      } catch (...) {  // no memory for the list: free the block instead
      }
    }
  }
  std::free(block);
}

}  // namespace cntkio::pool
