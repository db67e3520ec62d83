// A growing column kept in fixed-size blocks, shared by the indexers (CTF, MLF): growth never copies, and the
// exact-size vector is built block by block, each block freed once copied (peak: the column plus one block).
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstddef>
#include <vector>

namespace cntkio {

// Hands freed heap pages back to the system (glibc keeps freed blocks in its arenas otherwise, so copying
// columns out of their blocks would hold both in memory at the peak).
inline void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

template <class T>
class BlockColumn {
 public:
  void push_back(T value) {
    if (blocks_.empty() || blocks_.back().size() == kBlock) blocks_.emplace_back();  // grows up to kBlock
    blocks_.back().push_back(value);
    ++size_;
  }
  size_t size() const { return size_; }
  T at(size_t i) const { return blocks_[i / kBlock][i % kBlock]; }
  // Appends every value (through `map`) to `out`, freeing each block once copied.
  template <class Map>
  void drain_into(std::vector<T>& out, Map map) {
    for (size_t i = 0; i < blocks_.size(); ++i) {
      for (const T& v : blocks_[i]) out.push_back(map(v));
      std::vector<T>().swap(blocks_[i]);
      if (i % 4 == 3) release_free_memory();
    }
    release_free_memory();
    blocks_.clear();
    size_ = 0;
  }
  std::vector<T> take() {
    std::vector<T> result;
    result.reserve(size_);
    drain_into(result, [](T v) { return v; });
    return result;
  }
  void take_into(std::vector<T>& out) {
    out.clear();
    out.reserve(size_);
    drain_into(out, [](T v) { return v; });
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 16;
  std::vector<std::vector<T>> blocks_;
  size_t size_ = 0;
};

}  // namespace cntkio
