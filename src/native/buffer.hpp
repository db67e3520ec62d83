// Output buffers of the native readers: vectors whose new elements are left uninitialised. Output arrays are
// written once, by the decoder, so zero-filling them first would be a wasted pass over memory.
#pragma once

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace cntkio {

template <class T>
struct NoInit : std::allocator<T> {
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

template <class T>
using Buffer = std::vector<T, NoInit<T>>;

}  // namespace cntkio
