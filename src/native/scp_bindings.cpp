// Python bindings of the SCP parser (scp.hpp), registered into cntkio._native by module.cpp.
// Arguments are checked here; the GIL is released while a file is parsed and while duplicates are dropped.
// The columns are handed to NumPy without a copy (each array owns its vector).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "scp.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using cntkio::bindings::numpy_object;

// A str from UTF-8 bytes, each byte of an invalid sequence as a lone surrogate (Python's surrogateescape).
nb::str decode(const char* data, size_t size) {
  PyObject* text = PyUnicode_DecodeUTF8(data, static_cast<Py_ssize_t>(size), "surrogateescape");
  if (text == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(text);
}

// ScpParser.finish's result (cntkio._native.ScpParseResult), read-only. The arrays are made into NumPy arrays once
// (no copy); a property gives the same object on every access.
struct ScpParseResult {
  nb::object key_blob;     // uint8: the keys, back to back
  nb::object key_offsets;  // int64 (entries + 1)
  nb::object paths;        // [str]: distinct physical paths, first-seen order
  nb::object path_ids;     // int32 (entries)
  nb::object starts, ends;  // int64 (entries): the frame range, -1/-1 unranged
  nb::object lines;         // int32 (entries)
  nb::object offsets;       // int64 (entries)
  nb::object source_ids;    // int32 (entries): the SCP file of each entry
  int64_t duplicate_entries = 0, duplicate_keys = 0;
  nb::object first_duplicates;  // [str]: the first few duplicated keys
};

class ScpParser {
 public:
  ScpParser(std::optional<nb::bytes> prefix, int64_t block) {
    if (block < 256 || block > (int64_t{1} << 30)) throw nb::value_error("block must be in [256, 2**30]");
    cntkio::scp::Options options;
    options.has_prefix = prefix.has_value();
    if (prefix) options.prefix.assign(prefix->c_str(), prefix->size());
    options.block_size = block;
    parser_.emplace(std::move(options));
  }

  nb::object add(int fd, int64_t size, nb::bytes directory) {
    if (fd < 0) throw nb::value_error("invalid file descriptor");
    if (size < 0) throw nb::value_error("size must be >= 0");
    if (!parser_) throw nb::value_error("the parser has finished");
    if (failed_) throw nb::value_error("the parser stopped at a malformed entry");
    const std::string dir(directory.c_str(), directory.size());
    bool ok = false;
    {
      nb::gil_scoped_release release;
      ok = parser_->add_file(fd, size, dir);
    }
    if (ok) return nb::none();
    failed_ = true;
    const cntkio::scp::Fatal& f = parser_->fatal();
    nb::object detail = f.has_detail ? nb::object(nb::bytes(f.detail.data(), f.detail.size())) : nb::none();
    return nb::make_tuple(f.message, f.offset, f.line, f.column, detail);
  }

  ScpParseResult finish() {
    if (!parser_) throw nb::value_error("the parser has finished");
    cntkio::scp::Result r;
    {
      nb::gil_scoped_release release;
      r = parser_->finish();
    }
    parser_.reset();
    ScpParseResult out;
    out.key_blob = numpy_object(std::move(r.key_blob));
    out.key_offsets = numpy_object(std::move(r.key_offsets));
    out.paths = cntkio::bindings::decoded_list(r.path_blob, r.path_offsets);
    std::vector<uint8_t>().swap(r.path_blob);
    out.path_ids = numpy_object(std::move(r.path_ids));
    out.starts = numpy_object(std::move(r.starts));
    out.ends = numpy_object(std::move(r.ends));
    out.lines = numpy_object(std::move(r.lines));
    out.offsets = numpy_object(std::move(r.offsets));
    out.source_ids = numpy_object(std::move(r.source_ids));
    out.duplicate_entries = r.duplicate_entries;
    out.duplicate_keys = r.duplicate_keys;
    nb::list first;
    for (const std::string& key : r.first_duplicates) first.append(decode(key.data(), key.size()));
    out.first_duplicates = std::move(first);
    return out;
  }

 private:
  std::optional<cntkio::scp::Parser> parser_;
  bool failed_ = false;
};

}  // namespace

void bind_scp(nb::module_& m) {
  nb::class_<ScpParseResult>(m, "ScpParseResult", "The entries of the SCP files a ScpParser read (its finish), read-only.")
      .def_ro("key_blob", &ScpParseResult::key_blob, "uint8: the entries' keys, back to back")
      .def_ro("key_offsets", &ScpParseResult::key_offsets, "int64 (entries + 1): key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("paths", &ScpParseResult::paths, "distinct physical paths (str), first-seen order")
      .def_ro("path_ids", &ScpParseResult::path_ids, "int32: each entry's path in paths")
      .def_ro("starts", &ScpParseResult::starts, "int64: first frame of each entry's range (-1: unranged)")
      .def_ro("ends", &ScpParseResult::ends, "int64: last frame of each entry's range (-1: unranged)")
      .def_ro("lines", &ScpParseResult::lines, "int32: 1-based line of each entry")
      .def_ro("offsets", &ScpParseResult::offsets, "int64: byte offset of each entry's line")
      .def_ro("source_ids", &ScpParseResult::source_ids, "int32: the SCP file (in the order added) of each entry")
      .def_ro("duplicate_entries", &ScpParseResult::duplicate_entries, "entries dropped for a duplicated key")
      .def_ro("duplicate_keys", &ScpParseResult::duplicate_keys, "distinct keys that were duplicated")
      .def_ro("first_duplicates", &ScpParseResult::first_duplicates, "the first few duplicated keys (str)");
  nb::class_<ScpParser>(m, "ScpParser")
      .def(nb::init<std::optional<nb::bytes>, int64_t>(), "prefix"_a.none(), "block"_a = int64_t{4} << 20,
           "An SCP parser: prefix is the normalized prefix path as UTF-8 bytes ('/' separators, one trailing '/'), "
           "or None (the first '...' of an entry then becomes its SCP file's directory); block: bytes per pread.")
      .def("add", &ScpParser::add, "fd"_a, "size"_a, "directory"_a,
           "Parse bytes [0, size) of the SCP file open as fd (pread in blocks, GIL released), appending its entries; "
           "directory: what '...' becomes (UTF-8 bytes). Returns None, or the malformed entry that stopped the parse "
           "as (message, byte offset, line, column, detail): detail is None, or bytes of the line to show, quoted, "
           "in place of the '{}' of the message. The parser is unusable after an error.")
      .def("finish", &ScpParser::finish,
           "The columns of the files added, every entry of a duplicated key dropped (GIL released): a ScpParseResult of "
           "key_blob uint8 + key_offsets int64 (entries + 1), paths (distinct physical paths, first-seen order, "
           "str), path_ids int32, starts and ends int64 (-1/-1 unranged), lines int32, offsets int64, source_ids int32, "
           "duplicate_entries, duplicate_keys, first_duplicates (the first few duplicated keys, str).");
}
