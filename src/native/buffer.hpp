// Output buffers of the native readers: vectors whose new elements are left uninitialised. Output arrays are
// written once, by the decoder, so zero-filling them first would be a wasted pass over memory.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace cntkio {

// Large buffers (chunks of parsed data) are aligned to 2 MiB and marked for transparent huge pages: filling a
// fresh 14 MB chunk then takes a handful of page faults instead of thousands.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeMinimum = size_t{4} << 20;

template <class T>
struct NoInit : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = NoInit<U>;
  };
  NoInit() = default;
  template <class U>
  NoInit(const NoInit<U>&) noexcept {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    if (bytes < kHugeMinimum) return std::allocator<T>::allocate(n);
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, bytes) != 0) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP the pages are ordinary ones
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugeMinimum) {
      std::allocator<T>::deallocate(p, n);
    } else {
      free(p);
    }
  }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <class T>
using Buffer = std::vector<T, NoInit<T>>;

}  // namespace cntkio
