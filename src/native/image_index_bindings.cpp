// Python bindings of the image map and base64 image file scanners and the base64 decoder (image_index.hpp),
// registered into cntkio._native by module.cpp. Arguments are checked here; the GIL is released while a file is
// scanned and while base64 is read and decoded. Columns are handed to NumPy without a copy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "file_io.hpp"
#include "image_index.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using cntkio::bindings::numpy_object;
using cntkio::bindings::OffsetArray;

namespace {

void check_file(int fd, int64_t size, int64_t block) {
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (size < 0) throw nb::value_error("size must be >= 0");
  if (block < 256 || block > (int64_t{1} << 30)) throw nb::value_error("block must be in [256, 2**30]");
}

// None, or (message, byte offset, line, column, detail bytes or None, key bytes or None, key line index or -1).
nb::object fatal_tuple(const cntkio::image::Fatal& f) {
  if (!f.failed()) return nb::none();
  nb::object detail = f.has_detail ? nb::object(nb::bytes(f.detail.data(), f.detail.size())) : nb::none();
  nb::object key = f.has_key ? nb::object(nb::bytes(f.key.data(), f.key.size())) : nb::none();
  return nb::make_tuple(f.message, f.offset, f.line, f.column, detail, key, f.key_index);
}

// image_map_scan's result (cntkio._native.ImageMapScanResult), read-only. The arrays are made into NumPy arrays
// once (no copy); a property gives the same object on every access.
struct ImageMapScanResult {
  int64_t columns = 0;                        // 2 or 3 (0: the file has no line)
  nb::object key_blob, key_offsets;           // uint8, int64: 3 columns: the keys
  nb::object key_index;                       // int64: 2 columns: the 0-based physical line index
  nb::object path_blob, path_offsets;         // uint8, int64: distinct plain paths and zip items
  nb::object path_ids;                        // int32
  nb::object container_blob, container_offsets;  // uint8, int64: distinct zip archives
  nb::object container_ids;                   // int32 (-1: a plain file)
  nb::object labels;                          // int64 (-1: not parsed)
  nb::object lines;                           // int32 (1-based)
  nb::object offsets;                         // int64: line starts
  nb::object fatal;                           // None or the fatal_tuple
};

// base64_index_scan's result (cntkio._native.Base64ScanResult), read-only, made as ImageMapScanResult is.
struct Base64ScanResult {
  bool has_keys = false, numeric_keys = true;
  nb::object key_blob, key_offsets;  // uint8, int64: text keys
  nb::object key_values;             // uint64: numeric keys, or the 0-based line index without keys
  nb::object labels;                 // int64 (-1: not parsed)
  nb::object payload_offsets, payload_lengths;  // int64: the base64 field
  nb::object lines;                  // int32 (1-based)
  nb::object offsets;                // int64: line starts
  nb::object fatal;                  // None or the fatal_tuple
};

ImageMapScanResult image_map_scan(int fd, int64_t size, nb::bytes directory, int64_t label_dim, int64_t block) {
  check_file(fd, size, block);
  if (label_dim < -1 || label_dim == 0) throw nb::value_error("label_dim must be >= 1, or -1 (no labels)");
  cntkio::image::MapOptions options;
  options.directory.assign(directory.c_str(), directory.size());
  options.label_dim = label_dim;
  options.block_size = block;
  cntkio::image::MapResult r;
  cntkio::image::Fatal fatal;
  {
    nb::gil_scoped_release release;
    cntkio::image::scan_map(fd, size, options, r, fatal);
  }
  ImageMapScanResult out;
  out.columns = r.columns;
  out.key_blob = numpy_object(std::move(r.key_blob));
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.key_index = numpy_object(std::move(r.key_index));
  out.path_blob = numpy_object(std::move(r.path_blob));
  out.path_offsets = numpy_object(std::move(r.path_offsets));
  out.path_ids = numpy_object(std::move(r.path_ids));
  out.container_blob = numpy_object(std::move(r.container_blob));
  out.container_offsets = numpy_object(std::move(r.container_offsets));
  out.container_ids = numpy_object(std::move(r.container_ids));
  out.labels = numpy_object(std::move(r.labels));
  out.lines = numpy_object(std::move(r.lines));
  out.offsets = numpy_object(std::move(r.offsets));
  out.fatal = fatal_tuple(fatal);
  return out;
}

Base64ScanResult base64_index_scan(int fd, int64_t size, int64_t label_dim, int64_t block) {
  check_file(fd, size, block);
  if (label_dim < -1 || label_dim == 0) throw nb::value_error("label_dim must be >= 1, or -1 (no labels)");
  cntkio::image::Base64Options options;
  options.label_dim = label_dim;
  options.block_size = block;
  cntkio::image::Base64Result r;
  cntkio::image::Fatal fatal;
  {
    nb::gil_scoped_release release;
    cntkio::image::scan_base64(fd, size, options, r, fatal);
  }
  Base64ScanResult out;
  out.has_keys = r.has_keys;
  out.numeric_keys = r.numeric_keys;
  out.key_blob = numpy_object(std::move(r.key_blob));
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.key_values = numpy_object(std::move(r.key_values));
  out.labels = numpy_object(std::move(r.labels));
  out.payload_offsets = numpy_object(std::move(r.payload_offsets));
  out.payload_lengths = numpy_object(std::move(r.payload_lengths));
  out.lines = numpy_object(std::move(r.lines));
  out.offsets = numpy_object(std::move(r.offsets));
  out.fatal = fatal_tuple(fatal);
  return out;
}

// Decodes `n` bytes at `data` (trailing non-base64 bytes dropped) into `out`; false when invalid.
bool decode_into(const uint8_t* data, size_t n, std::vector<uint8_t>& out) {
  const size_t trimmed = cntkio::image::base64_trim(data, n);
  out.resize(trimmed / 4 * 3);
  const int64_t written = cntkio::image::base64_decode(data, trimmed, out.data());
  if (written < 0) return false;
  out.resize(static_cast<size_t>(written));
  return true;
}

nb::object base64_decode(nb::bytes data) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.c_str());
  const size_t size = data.size();
  std::vector<uint8_t> out;
  bool ok = false;
  {
    nb::gil_scoped_release release;  // `data` is immutable and kept alive by the caller
    ok = decode_into(bytes, size, out);
  }
  if (!ok) return nb::none();
  return nb::bytes(reinterpret_cast<const char*>(out.data()), out.size());
}

nb::object base64_decode_file(int fd, int64_t offset, int64_t length) {
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (offset < 0 || length < 0) throw nb::value_error("offset and length must be >= 0");
  std::vector<uint8_t> raw, out;
  bool ok = false;
  {
    nb::gil_scoped_release release;
    raw.resize(static_cast<size_t>(length));
    cntkio::read_exact(fd, offset, length, reinterpret_cast<char*>(raw.data()));
    ok = decode_into(raw.data(), raw.size(), out);
  }
  if (!ok) return nb::none();
  return nb::bytes(reinterpret_cast<const char*>(out.data()), out.size());
}

nb::tuple base64_decode_batch(int fd, OffsetArray offsets, OffsetArray lengths) {
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  const size_t n = offsets.shape(0);
  if (lengths.shape(0) != n) throw nb::value_error("offsets and lengths differ in length");
  const int64_t* o = offsets.data();
  const int64_t* l = lengths.data();
  for (size_t i = 0; i < n; ++i) {
    if (o[i] < 0 || l[i] < 0 || o[i] > INT64_MAX - l[i]) throw nb::value_error("offsets and lengths must be >= 0");
  }
  cntkio::image::DecodedBatch r;
  {
    nb::gil_scoped_release release;
    r = cntkio::image::decode_batch(fd, o, l, n);
  }
  return nb::make_tuple(cntkio::to_numpy(std::move(r.blob)), cntkio::to_numpy(std::move(r.out_offsets)),
                        cntkio::to_numpy(std::move(r.ok)));
}

}  // namespace

// The whole file at `path` (file system bytes), read with the GIL released once (Python's open/read/close would
// release and take it back around every system call). An error raises OSError (FileNotFoundError, ...).
nb::bytes read_file(nb::bytes path) {
  std::string name(path.c_str(), path.size());
  if (name.find('\0') != std::string::npos) throw nb::value_error("embedded null byte in the path");
  std::string data;
  int error;
  {
    nb::gil_scoped_release release;
    error = cntkio::read_whole_file(name.c_str(), data);
  }
  if (error != 0) {
    errno = error;
    PyErr_SetFromErrnoWithFilename(PyExc_OSError, name.c_str());
    throw nb::python_error();
  }
  return nb::bytes(data.data(), data.size());
}

void bind_image_index(nb::module_& m) {
  nb::class_<ImageMapScanResult>(m, "ImageMapScanResult", "The lines of an image map file (image_map_scan), read-only.")
      .def_ro("columns", &ImageMapScanResult::columns, "2 or 3 (0: the file has no line)")
      .def_ro("key_blob", &ImageMapScanResult::key_blob, "uint8: 3 columns: the keys, back to back")
      .def_ro("key_offsets", &ImageMapScanResult::key_offsets, "int64: key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("key_index", &ImageMapScanResult::key_index, "int64: 2 columns: the 0-based line index")
      .def_ro("path_blob", &ImageMapScanResult::path_blob, "uint8: distinct plain paths and zip items, back to back")
      .def_ro("path_offsets", &ImageMapScanResult::path_offsets, "int64: offsets of the paths in path_blob")
      .def_ro("path_ids", &ImageMapScanResult::path_ids, "int32: each line's path")
      .def_ro("container_blob", &ImageMapScanResult::container_blob, "uint8: distinct zip archives, back to back")
      .def_ro("container_offsets", &ImageMapScanResult::container_offsets, "int64: offsets of the archives in container_blob")
      .def_ro("container_ids", &ImageMapScanResult::container_ids, "int32: each line's archive (-1: a plain file)")
      .def_ro("labels", &ImageMapScanResult::labels, "int64: class ids (-1: not parsed)")
      .def_ro("lines", &ImageMapScanResult::lines, "int32: 1-based line numbers")
      .def_ro("offsets", &ImageMapScanResult::offsets, "int64: line starts")
      .def_ro("fatal", &ImageMapScanResult::fatal, "None or (message with '{}' for detail, byte offset, line, column, "
              "detail bytes or None, key bytes or None, key line index or -1)");
  nb::class_<Base64ScanResult>(m, "Base64ScanResult", "The lines of a base64 image file (base64_index_scan), read-only.")
      .def_ro("has_keys", &Base64ScanResult::has_keys, "the lines have a key field")
      .def_ro("numeric_keys", &Base64ScanResult::numeric_keys, "the keys are key_values (numbers, or line indices without keys)")
      .def_ro("key_blob", &Base64ScanResult::key_blob, "uint8: text keys, back to back")
      .def_ro("key_offsets", &Base64ScanResult::key_offsets, "int64: key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("key_values", &Base64ScanResult::key_values, "uint64: numeric keys, or the 0-based line index without keys")
      .def_ro("labels", &Base64ScanResult::labels, "int64: class ids (-1: not parsed)")
      .def_ro("payload_offsets", &Base64ScanResult::payload_offsets, "int64: first byte of each base64 field")
      .def_ro("payload_lengths", &Base64ScanResult::payload_lengths, "int64: bytes of each base64 field")
      .def_ro("lines", &Base64ScanResult::lines, "int32: 1-based line numbers")
      .def_ro("offsets", &Base64ScanResult::offsets, "int64: line starts")
      .def_ro("fatal", &Base64ScanResult::fatal, "None or a fatal error, as ImageMapScanResult.fatal");
  m.def("read_file", &read_file, "path"_a, "The whole file at path (bytes), read with the GIL released.");
  m.def("image_map_scan", &image_map_scan, "fd"_a, "size"_a, "directory"_a, "label_dim"_a,
        "block"_a = int64_t{4} << 20,
        "Scan bytes [0, size) of the image map file open as fd (pread in blocks, GIL released). directory: what a "
        "leading '...' becomes (bytes); label_dim: -1 for no labels. An ImageMapScanResult: columns (2 or 3), key_blob uint8 + "
        "key_offsets int64 (3 columns) or key_index int64 (2 columns: 0-based line index), path_blob + path_offsets "
        "(distinct plain paths and zip items), path_ids int32, container_blob + container_offsets (distinct zip "
        "archives), container_ids int32 (-1: plain file), labels int64 (-1: not parsed), lines int32 (1-based), "
        "offsets int64 (line starts), fatal: None or (message with '{}' for detail, byte offset, line, column, "
        "detail bytes or None, key bytes or None, key line index or -1).");
  m.def("base64_index_scan", &base64_index_scan, "fd"_a, "size"_a, "label_dim"_a, "block"_a = int64_t{4} << 20,
        "Scan bytes [0, size) of the base64 image file open as fd (pread in blocks, GIL released). A "
        "Base64ScanResult: "
        "has_keys, numeric_keys, key_blob + key_offsets (text keys) or key_values uint64 (numeric keys, or the "
        "0-based line index without keys), labels int64 (-1: not parsed), payload_offsets and payload_lengths int64, "
        "lines int32, offsets int64 (line starts), fatal (as image_map_scan's).");
  m.def("base64_decode", &base64_decode, "data"_a,
        "Base64 data decoded (standard alphabet, '=' padding, trailing non-base64 bytes dropped), or None when "
        "invalid (GIL released).");
  m.def("base64_decode_file", &base64_decode_file, "fd"_a, "offset"_a, "length"_a,
        "Bytes [offset, offset + length) of the file open as fd, base64-decoded as base64_decode does, or None "
        "(GIL released). Raises ShortRead where the file ends first.");
  m.def("base64_decode_batch", &base64_decode_batch, "fd"_a, "offsets"_a, "lengths"_a,
        "Many base64 payloads of the file open as fd decoded in one call (GIL released): (blob uint8, "
        "out_offsets int64 (n + 1), ok uint8): payload i is blob[out_offsets[i]:out_offsets[i + 1]] when ok[i] "
        "(empty otherwise). Raises ShortRead where the file ends before a payload.");
}
