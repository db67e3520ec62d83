// Python binding of the Kaldi matrix reader (kaldi.hpp), registered into cntkio._native by module.cpp. Arguments
// are checked here; the GIL is released while matrices are read, decoded and expanded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
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
#include "kaldi_scp.hpp"
#include "threads.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using cntkio::bindings::numpy_object;
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
                        const Vector<int64_t>& key_offsets, const Vector<uint8_t>& check_keys, int threads) {
  const size_t count = offsets.shape(0);
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (threads < 1) throw nb::value_error("threads must be >= 1");
  if (key_offsets.shape(0) != count + 1 || check_keys.shape(0) != count)
    throw nb::value_error("key_offsets must have one entry more than offsets, check_keys as many");
  for (size_t i = 0; i < count; ++i)
    if (key_offsets(i) < 0 || key_offsets(i + 1) < key_offsets(i) ||
        static_cast<size_t>(key_offsets(i + 1)) > keys.shape(0) || offsets(i) < 0)
      throw nb::value_error("key_offsets must be non-decreasing within keys, offsets >= 0");
  std::vector<int32_t> kinds(count, -1);
  std::vector<int64_t> rows(count, 0), cols(count, 0), ends(count, 0);
  constexpr size_t kPerThread = 1024;  // fewer headers than this per thread: not worth a thread
  const size_t runs = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads), count / kPerThread));
  std::vector<std::vector<std::pair<size_t, std::string>>> errors(runs);  // per run, in entry order
  {
    nb::gil_scoped_release release;
    cntkio::on_threads(runs, [&](size_t run) {
      std::string prefix;
      for (size_t i = count * run / runs; i < count * (run + 1) / runs; ++i) {
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
          errors[run].emplace_back(i, e.what());
        } catch (const std::runtime_error& e) {  // an I/O error (read_some): this entry's, reported as its own
          errors[run].emplace_back(i, std::string("cannot read the matrix header at offset ") +
                                          std::to_string(offsets(i)) + ": " + e.what());
        }
      }
    });
  }
  nb::list bad;
  for (const auto& run : errors)
    for (const auto& [i, why] : run) bad.append(nb::make_tuple(i, why));
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

// kaldi_scan's result (cntkio._native.KaldiScan), read-only.
struct KaldiScan {
  nb::object key_blob, key_offsets, offsets;  // uint8, int64 (matrices + 1), int64 (matrices)
  int32_t stop = 0;                           // 0 the end, 1 no key, 2 a broken header
  int64_t stop_offset = -1;
  nb::bytes stop_key, stop_detail;
};

KaldiScan kaldi_scan(int fd, int64_t size, int64_t max_key_bytes) {
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (size < 0 || max_key_bytes < 1 || max_key_bytes > (1 << 20))
    throw nb::value_error("size must be >= 0 and max_key_bytes in [1, 2**20]");
  cntkio::kaldi::ArchiveScan r;
  try {
    nb::gil_scoped_release release;
    r = cntkio::kaldi::scan_archive(fd, size, static_cast<size_t>(max_key_bytes));
  } catch (const std::runtime_error& e) {  // an I/O error
    PyErr_SetString(PyExc_OSError, e.what());
    throw nb::python_error();
  }
  KaldiScan out;
  out.key_blob = numpy_object(std::move(r.key_blob));
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.offsets = numpy_object(std::move(r.offsets));
  out.stop = r.stop;
  out.stop_offset = r.stop_offset;
  out.stop_key = nb::bytes(r.stop_key.data(), r.stop_key.size());
  out.stop_detail = nb::bytes(r.stop_detail.data(), r.stop_detail.size());
  return out;
}

// kaldi_scp's result (cntkio._native.KaldiScp), read-only: the columns as NumPy arrays made once (no copy).
struct KaldiScp {
  nb::object key_blob, key_offsets;  // uint8, int64 (entries + 1)
  nb::object paths;                  // [str]: distinct paths, first-seen order (surrogateescape)
  nb::object path_ids;               // int32 (entries)
  nb::object offsets;                // int64 (entries)
  nb::object checked_keys;           // uint8 (entries)
  nb::object problems, problem_lines, problem_offsets;  // int32, int64, int64
};

KaldiScp kaldi_scp(nb::bytes data) {
  cntkio::kaldi::ScpEntries r;
  {
    nb::gil_scoped_release release;  // (the bytes are immutable and held by the caller)
    r = cntkio::kaldi::parse_scp(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
  }
  KaldiScp out;
  out.key_blob = numpy_object(std::move(r.key_blob));
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.paths = cntkio::bindings::decoded_list(r.path_blob, r.path_offsets);
  out.path_ids = numpy_object(std::move(r.path_ids));
  out.offsets = numpy_object(std::move(r.offsets));
  out.checked_keys = numpy_object(std::move(r.checked_keys));
  out.problems = numpy_object(std::move(r.problems));
  out.problem_lines = numpy_object(std::move(r.problem_lines));
  out.problem_offsets = numpy_object(std::move(r.problem_offsets));
  return out;
}

}  // namespace

void bind_kaldi(nb::module_& m) {
  m.def("kaldi_header", &kaldi_header, "data"_a,
        "(kind, rows, cols, header_bytes, data_bytes) of the Kaldi binary matrix whose \\0B marker starts data "
        "(kind: 0 FM, 1 DM, 2 CM, 3 CM2, 4 CM3); ValueError saying why it cannot be read.");
  m.def("kaldi_headers", &kaldi_headers, "fd"_a, "offsets"_a, "keys"_a, "key_offsets"_a, "check_keys"_a,
        "threads"_a = 1,
        "Headers of the matrices of one archive at offsets, keys checked, read on up to `threads` threads (GIL "
        "released): (kinds, rows, cols, ends, [(entry, reason)] in entry order), the kind of a bad entry -1.");
  nb::class_<KaldiScp>(m, "KaldiScp", "The entries of a Kaldi scp file (kaldi_scp), read-only.")
      .def_ro("key_blob", &KaldiScp::key_blob, "uint8: the keys, back to back")
      .def_ro("key_offsets", &KaldiScp::key_offsets, "int64 (entries + 1): key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("paths", &KaldiScp::paths, "distinct paths (str, undecodable bytes as surrogateescape does), first-seen order")
      .def_ro("path_ids", &KaldiScp::path_ids, "int32: each entry's path in paths")
      .def_ro("offsets", &KaldiScp::offsets, "int64: each entry's byte offset of the matrix's \\0B marker (0: none)")
      .def_ro("checked_keys", &KaldiScp::checked_keys, "uint8: 1 when the entry has an offset ('key ' precedes it)")
      .def_ro("problems", &KaldiScp::problems, "int32: lines that are not entries, why: 1 no target, 2 a pipe, "
              "3 a row/column range, 4 an offset not below 2**63 (the parse stops at the others)")
      .def_ro("problem_lines", &KaldiScp::problem_lines, "int64: the 1-based line of each problem")
      .def_ro("problem_offsets", &KaldiScp::problem_offsets, "int64: the byte offset of each problem's line");
  nb::class_<KaldiScan>(m, "KaldiScan", "The matrices of an archive read directly (kaldi_scan), read-only.")
      .def_ro("key_blob", &KaldiScan::key_blob, "uint8: the keys, back to back")
      .def_ro("key_offsets", &KaldiScan::key_offsets, "int64 (matrices + 1)")
      .def_ro("offsets", &KaldiScan::offsets, "int64: each matrix's \\0B marker")
      .def_ro("stop", &KaldiScan::stop, "why the scan ended: 0 the end of the archive, 1 no 'key ' where a matrix "
              "starts, 2 a header that cannot be read")
      .def_ro("stop_offset", &KaldiScan::stop_offset, "1: where the key was expected; 2: the header's offset")
      .def_ro("stop_key", &KaldiScan::stop_key, "2: the broken matrix's key")
      .def_ro("stop_detail", &KaldiScan::stop_detail, "1: up to 40 bytes found there; 2: why (UTF-8)");
  m.def("kaldi_scan", &kaldi_scan, "fd"_a, "size"_a, "max_key_bytes"_a,
        "The matrices of the Kaldi archive open as fd, found one after the other (each header read, the data "
        "skipped by its size; GIL released): a KaldiScan. OSError on an I/O error.");
  m.def("kaldi_scp", &kaldi_scp, "data"_a,
        "The entries of a Kaldi scp file ('key path:offset' or 'key path' lines) from its bytes (GIL released): a "
        "KaldiScp of columns, and the lines that are not entries.");
  m.def("kaldi_read", &kaldi_read, "fds"_a, "files"_a, "offsets"_a, "kinds"_a, "rows"_a, "cols"_a, "left"_a,
        "right"_a, "as_double"_a,
        "Kaldi matrices (one utterance each) read by offset, decoded and expanded by a context window: "
        "(values, None), or (None, (matrix, offset, reason)) if one is not as indexed.");
}
