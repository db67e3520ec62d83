// Output buffers of the native readers: vectors whose large storage is a mapping of its own (Mapped), and those whose
// new elements are also left uninitialised (Buffer: output arrays written once, by the decoder, where zero-filling
// them first would be a wasted pass over memory).
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace cntkio {

// Large buffers (chunks of parsed data, minibatches) are mappings of their own, aligned to 2 MiB and marked for
// transparent huge pages, and unmapped when freed: filling a fresh 14 MB chunk takes a handful of page faults
// instead of thousands, and a freed chunk's memory goes back to the system at once (from the heap, once malloc's
// adaptive threshold grew past chunk sizes, its pages stayed resident and fragmented: a source under a memory
// budget crept 10-30 % over it).
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeMinimum = size_t{4} << 20;
constexpr size_t kPage = size_t{4} << 10;

inline size_t mapped_length(size_t bytes) { return (bytes + kPage - 1) & ~(kPage - 1); }

inline void* map_large(size_t bytes) {
  const size_t length = mapped_length(bytes);
  void* p = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + length + kHugePage;
  if (end > aligned + length) munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
#ifdef MADV_HUGEPAGE  // (Linux only)
  madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);  // advice only: without THP, ordinary pages
#endif
  return reinterpret_cast<void*>(aligned);
}

inline void unmap_large(void* p, size_t bytes) noexcept { munmap(p, mapped_length(bytes)); }

// std::allocator for small blocks, a mapping of its own for large ones (see above); elements are value-initialised
// as with std::allocator.
template <class T>
struct MappedLarge : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = MappedLarge<U>;
  };
  MappedLarge() = default;
  template <class U>
  MappedLarge(const MappedLarge<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    if (n * sizeof(T) < kHugeMinimum) return std::allocator<T>::allocate(n);
    return static_cast<T*>(map_large(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugeMinimum) {
      std::allocator<T>::deallocate(p, n);
    } else {
      unmap_large(p, n * sizeof(T));
    }
  }
};

// MappedLarge whose new elements are left uninitialised: for arrays written once, by the decoder.
template <class T>
struct NoInit : MappedLarge<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = NoInit<U>;
  };
  NoInit() = default;
  template <class U>
  NoInit(const NoInit<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A vector that maps its storage when it is large (value-initialised elements, as std::vector).
template <class T>
using Mapped = std::vector<T, MappedLarge<T>>;

template <class T>
using Buffer = std::vector<T, NoInit<T>>;

}  // namespace cntkio
