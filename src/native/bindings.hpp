// What the *_bindings.cpp files of cntkio._native share: the array argument types, handing buffers to NumPy, the
// strict cast of an array argument, and the bind_* functions module.cpp calls from NB_MODULE.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "numpy_out.hpp"

namespace cntkio::bindings {

namespace nb = nanobind;

// Array arguments: 1-D, C-contiguous, on the CPU, read only.
template <class T>
using Vector = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OffsetArray = Vector<int64_t>;
using IndexArray = Vector<int32_t>;
using FlagArray = Vector<uint8_t>;
using ByteArray = Vector<uint8_t>;
using U64Array = Vector<uint64_t>;
using F64Array = Vector<double>;
// Any element type and shape (checked by the caller), C-contiguous, read only.
using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// Moves a byte vector into a NumPy array of the given element type and shape (the array owns the vector).
template <class A = std::allocator<char>>
nb::ndarray<nb::numpy> bytes_to_numpy(std::vector<char, A>&& bytes, nb::dlpack::dtype dtype, std::vector<size_t> shape) {
  auto* owned = new std::vector<char, A>(std::move(bytes));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<char, A>*>(p); });
  return nb::ndarray<nb::numpy>(owned->data(), shape.size(), shape.data(), owner, nullptr, dtype);
}

// A vector moved into a NumPy array (no copy), made into its Python object once: a result type keeps it so that a
// property gives the same array on every access (as the value of a dict did).
template <class T, class A>
nb::object numpy_object(std::vector<T, A>&& values, std::vector<size_t> shape = {}) {
  return nb::cast(to_numpy(std::move(values), std::move(shape)));
}

// The pieces blob[offsets[i], offsets[i + 1]) as a list of str, UTF-8 with each byte of an invalid sequence a lone
// surrogate (Python's surrogateescape): paths read from files, given back as Python names them.
inline nb::list decoded_list(const std::vector<uint8_t>& blob, const std::vector<int64_t>& offsets) {
  nb::list out;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    PyObject* text = PyUnicode_DecodeUTF8(reinterpret_cast<const char*>(blob.data()) + offsets[i],
                                          static_cast<Py_ssize_t>(offsets[i + 1] - offsets[i]), "surrogateescape");
    if (text == nullptr) throw nb::python_error();
    out.append(nb::steal<nb::str>(text));
  }
  return out;
}

// An array argument whose data pointer is kept beyond the cast: taken as it is (no converted copy that
// would be freed while the pointer is still in use); anything else is a ValueError naming `what`.
template <class Array>
Array exact_array(nb::handle object, const std::string& what) {
  try {
    return nb::cast<Array>(object, false);
  } catch (const nb::cast_error&) {
    throw nb::value_error((what + ": expected a C-contiguous NumPy array of the right type").c_str());
  }
}

}  // namespace cntkio::bindings

// Each registers its area's functions, classes and exceptions into the module (called by module.cpp).
void bind_ctf(nanobind::module_& m);           // ctf_bindings.cpp: CTF index and parse, CtfErrors
void bind_cbf(nanobind::module_& m);           // cbf_bindings.cpp: CbfFile, CbfError, cbf_encode
void bind_keys(nanobind::module_& m);          // keys_bindings.cpp: key join, duplicates, CNTK key hash
void bind_order(nanobind::module_& m);         // order_bindings.cpp: CNTK block order, default unit keys, argsort
void bind_store(nanobind::module_& m);         // store_bindings.cpp: ChunkStore and gather, the buffer pool, malloc_trim
void bind_records(nanobind::module_& m);       // records_bindings.cpp
void bind_mlf(nanobind::module_& m);           // mlf_bindings.cpp
void bind_scp(nanobind::module_& m);           // scp_bindings.cpp
void bind_htk(nanobind::module_& m);           // htk_bindings.cpp
void bind_kaldi(nanobind::module_& m);         // kaldi_bindings.cpp: Kaldi matrix headers and decoding
void bind_image_index(nanobind::module_& m);   // image_index_bindings.cpp
void bind_image_pixels(nanobind::module_& m);  // image_pixels_bindings.cpp
