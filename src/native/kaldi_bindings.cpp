// Python binding of the Kaldi matrix reader (kaldi.hpp), registered into cntkio._native by module.cpp. Arguments
// are checked here; the GIL is released while matrices are read, decoded and expanded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "buffer.hpp"
#include "kaldi.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using cntkio::bindings::Vector;

namespace {

// (kind, rows, cols, header_bytes, data_bytes) of the matrix whose "\0B" marker starts `data`; ValueError saying
// why when it cannot be read.
nb::tuple kaldi_header(nb::bytes data) {
  try {
    const cntkio::kaldi::Header h =
        cntkio::kaldi::parse_header(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
    return nb::make_tuple(h.kind, h.rows, h.cols, h.header_bytes, h.data_bytes);
  } catch (const cntkio::kaldi::BadHeader& e) {
    throw nb::value_error(e.what());
  }
}

// The headers of matrices of one open archive: each (offset, key), key checked when check_keys[i]. Returns columns
// (kinds, rows, cols, ends: the byte after the matrix) and the errors [(entry, reason)]; a bad entry's kind is -1.
nb::tuple kaldi_headers(int fd, const Vector<int64_t>& offsets, const Vector<uint8_t>& keys,
                        const Vector<int64_t>& key_offsets, const Vector<uint8_t>& check_keys) {
  const size_t count = offsets.shape(0);
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (key_offsets.shape(0) != count + 1 || check_keys.shape(0) != count)
    throw nb::value_error("key_offsets must have one entry more than offsets, check_keys as many");
  for (size_t i = 0; i < count; ++i)
    if (key_offsets(i) < 0 || key_offsets(i + 1) < key_offsets(i) ||
        static_cast<size_t>(key_offsets(i + 1)) > keys.shape(0) || offsets(i) < 0)
      throw nb::value_error("key_offsets must be non-decreasing within keys, offsets >= 0");
  std::vector<int32_t> kinds(count, -1);
  std::vector<int64_t> rows(count, 0), cols(count, 0), ends(count, 0);
  std::vector<std::pair<size_t, std::string>> errors;
  {
    nb::gil_scoped_release release;
    std::string prefix;
    for (size_t i = 0; i < count; ++i) {
      prefix.clear();
      if (check_keys(i)) {
        prefix.assign(reinterpret_cast<const char*>(keys.data()) + key_offsets(i),
                      static_cast<size_t>(key_offsets(i + 1) - key_offsets(i)));
        prefix += ' ';
      }
      try {
        const cntkio::kaldi::Header h = cntkio::kaldi::read_header_at(fd, offsets(i), prefix);
        kinds[i] = h.kind;
        rows[i] = h.rows;
        cols[i] = h.cols;
        ends[i] = offsets(i) + h.header_bytes + h.data_bytes;
      } catch (const cntkio::kaldi::BadHeader& e) {
        errors.emplace_back(i, e.what());
      } catch (const std::runtime_error& e) {  // an I/O error (read_some): this entry's, reported as its own
        errors.emplace_back(i, std::string("cannot read the matrix header at offset ") + std::to_string(offsets(i)) +
                                   ": " + e.what());
      }
    }
  }
  nb::list bad;
  for (const auto& [i, why] : errors) bad.append(nb::make_tuple(i, why));
  using cntkio::bindings::numpy_object;
  return nb::make_tuple(numpy_object(std::move(kinds)), numpy_object(std::move(rows)), numpy_object(std::move(cols)),
                        numpy_object(std::move(ends)), bad);
}

template <class T>
nb::object read(const std::vector<int>& fds, const std::vector<cntkio::kaldi::Matrix>& matrices, int64_t cols,
                const std::vector<int64_t>& seq_offsets, int left, int right) {
  const int64_t total = seq_offsets.back();
  const int64_t width = cols * (1 + left + right);
  cntkio::Buffer<T> out(static_cast<size_t>(total * width));
  {
    nb::gil_scoped_release release;
    if (left == 0 && right == 0) {
      cntkio::kaldi::read_matrices<T>(fds, matrices, cols, out.data());
    } else {
      cntkio::Buffer<T> frames(static_cast<size_t>(total * cols));
      cntkio::kaldi::read_matrices<T>(fds, matrices, cols, frames.data());
      cntkio::kaldi::expand_context<T>(frames.data(), cols, seq_offsets.data(),
                                       static_cast<int64_t>(matrices.size()), left, right, out.data());
    }
  }
  return nb::cast(cntkio::to_numpy(std::move(out), {static_cast<size_t>(total), static_cast<size_t>(width)}));
}

// The matrices of a chunk (one utterance each, in order), decoded and expanded by a context window: (values, None),
// or (None, (matrix, offset, reason)) when one is not as indexed (the archive changed or was cut short).
nb::tuple kaldi_read(const Vector<int32_t>& fds, const Vector<int32_t>& files, const Vector<int64_t>& offsets,
                     const Vector<int32_t>& kinds, const Vector<int64_t>& rows, int64_t cols, int left, int right,
                     bool as_double) {
  const size_t count = files.shape(0);
  if (offsets.shape(0) != count || kinds.shape(0) != count || rows.shape(0) != count)
    throw nb::value_error("files, offsets, kinds and rows must have one entry per matrix");
  if (cols < 1 || cols > std::numeric_limits<int32_t>::max() || left < 0 || right < 0 || left > (1 << 20) ||
      right > (1 << 20))
    throw nb::value_error("cols must be in [1, 2**31) and the context sides in [0, 2**20]");
  std::vector<int> descriptors(fds.shape(0));
  for (size_t f = 0; f < descriptors.size(); ++f) {
    if (fds(f) < 0) throw nb::value_error("invalid file descriptor");
    descriptors[f] = fds(f);
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / 16 / (cols * (1 + left + right));
  std::vector<cntkio::kaldi::Matrix> matrices(count);
  std::vector<int64_t> seq_offsets(count + 1, 0);
  for (size_t m = 0; m < count; ++m) {
    if (files(m) < 0 || static_cast<size_t>(files(m)) >= descriptors.size())
      throw nb::value_error("matrix file out of range");
    if (offsets(m) < 0 || kinds(m) < 0 || kinds(m) > 4 || rows(m) < 0 || rows(m) > limit - seq_offsets[m])
      throw nb::value_error("matrix offset, kind or rows out of range");
    matrices[m] = {files(m), offsets(m), kinds(m), rows(m)};
    seq_offsets[m + 1] = seq_offsets[m] + rows(m);
  }
  try {
    nb::object values = as_double ? read<double>(descriptors, matrices, cols, seq_offsets, left, right)
                                  : read<float>(descriptors, matrices, cols, seq_offsets, left, right);
    return nb::make_tuple(values, nb::none());
  } catch (const cntkio::kaldi::BadMatrix& e) {
    return nb::make_tuple(nb::none(), nb::make_tuple(e.matrix, e.offset, std::string(e.what())));
  }
}

}  // namespace

void bind_kaldi(nb::module_& m) {
  m.def("kaldi_header", &kaldi_header, "data"_a,
        "(kind, rows, cols, header_bytes, data_bytes) of the Kaldi binary matrix whose \\0B marker starts data "
        "(kind: 0 FM, 1 DM, 2 CM, 3 CM2, 4 CM3); ValueError saying why it cannot be read.");
  m.def("kaldi_headers", &kaldi_headers, "fd"_a, "offsets"_a, "keys"_a, "key_offsets"_a, "check_keys"_a,
        "Headers of the matrices of one archive at offsets, keys checked: (kinds, rows, cols, ends, "
        "[(entry, reason)]), the kind of a bad entry -1.");
  m.def("kaldi_read", &kaldi_read, "fds"_a, "files"_a, "offsets"_a, "kinds"_a, "rows"_a, "cols"_a, "left"_a,
        "right"_a, "as_double"_a,
        "Kaldi matrices (one utterance each) read by offset, decoded and expanded by a context window: "
        "(values, None), or (None, (matrix, offset, reason)) if one is not as indexed.");
}
