// Handing native buffers to NumPy without a copy: the array owns the moved vector through a capsule.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <utility>
#include <vector>

namespace cntkio {

// Moves a vector into a NumPy array that owns it; `shape` defaults to one dimension of the vector's size.
template <class T, class A = std::allocator<T>>
nanobind::ndarray<nanobind::numpy, T> to_numpy(std::vector<T, A>&& values, std::vector<size_t> shape = {}) {
  auto* owned = new std::vector<T, A>(std::move(values));
  nanobind::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T, A>*>(p); });
  if (shape.empty()) shape = {owned->size()};
  return nanobind::ndarray<nanobind::numpy, T>(owned->data(), shape.size(), shape.data(), owner);
}

}  // namespace cntkio
