// Python bindings of the CTF indexer and parser (ctf.hpp), registered into cntkio._native by module.cpp: the file
// is read with pread, the GIL released while the byte-level loops run. Arguments are checked here; the columns are
// handed to NumPy without a copy (each array owns its vector).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "ctf.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::bindings;
using namespace cntkio::ctf;

namespace {

using AliasSpec = std::tuple<std::string, bool, uint64_t>;

std::vector<Alias> to_aliases(const std::vector<AliasSpec>& specs) {
  std::vector<Alias> aliases;
  for (const auto& [name, sparse, dim] : specs) {
    if (name.empty()) throw nb::value_error("an alias must not be empty");
    if (dim == 0 || (sparse && dim > INT32_MAX) || dim > (uint64_t{1} << 31))
      throw nb::value_error("a stream dimension is out of range");
    aliases.push_back({name, sparse, dim});
  }
  if (aliases.empty()) throw nb::value_error("no stream to read");
  return aliases;
}

// The counted errors of a CTF index or parse, a column per field (cntkio._native.CtfErrors): what the error ledger
// keeps, with no Python object per error. `record`/`end`: the bad record's bytes; the index's errors also carry the
// key text of their sequence (key i is key_blob[key_offsets[i], key_offsets[i + 1])).
struct CtfErrors {
  nb::ndarray<nb::numpy, int64_t> offset, sequence, line, column, record, end, key_offsets;
  nb::ndarray<nb::numpy, int32_t> kind, stream, byte;
  nb::ndarray<nb::numpy, uint8_t> key_blob;
};

CtfErrors to_columns(std::vector<ErrorRecord>&& errors, const std::vector<std::string>& keys = {}) {
  const size_t n = errors.size();
  std::vector<int64_t> offsets(n), sequences(n), lines(n), columns(n), records(n), ends(n), key_offsets{0};
  std::vector<int32_t> kinds(n), streams(n), bytes(n);
  for (size_t i = 0; i < n; ++i) {
    const ErrorRecord& e = errors[i];
    offsets[i] = e.offset;
    kinds[i] = e.kind;
    streams[i] = e.stream;
    sequences[i] = e.sequence;
    lines[i] = e.line;
    columns[i] = e.column;
    bytes[i] = e.byte;
    records[i] = e.record;
    ends[i] = e.end;
  }
  std::vector<uint8_t> blob;
  for (const std::string& key : keys) {
    blob.insert(blob.end(), key.begin(), key.end());
    key_offsets.push_back(static_cast<int64_t>(blob.size()));
  }
  errors.clear();
  return {to_numpy(std::move(offsets)), to_numpy(std::move(sequences)), to_numpy(std::move(lines)),
          to_numpy(std::move(columns)), to_numpy(std::move(records)), to_numpy(std::move(ends)),
          to_numpy(std::move(key_offsets)), to_numpy(std::move(kinds)), to_numpy(std::move(streams)),
          to_numpy(std::move(bytes)), to_numpy(std::move(blob))};
}

// ctf_index's result (cntkio._native.CtfIndexResult): the index of a CTF file, read-only. The arrays are made into
// NumPy arrays once (no copy); a property gives the same array on every access.
struct CtfIndexResult {
  int mode = 0;        // IdMode: 0 line, 1 numeric ids, 2 text ids
  int64_t begin = 0;   // first data byte (past a BOM and leading whitespace)
  nb::object offsets;  // int64: first byte of each kept sequence
  nb::object ends;     // int64: end of each kept sequence's bytes
  nb::object lengths;  // int32: samples of each kept sequence
  nb::object keys;     // uint64: numeric keys (the line number in line mode)
  nb::object key_blob;     // uint8: text mode: the ids, back to back
  nb::object key_offsets;  // int64: text mode: id i is key_blob[key_offsets[i]:key_offsets[i + 1]]
  nb::object chunk_starts;       // int64: first sequence of each chunk, then the sequence count
  nb::object chunk_first_lines;  // int64: 0-based line of each chunk's first sequence
  nb::object errors;             // CtfErrors: counted errors, with their sequences' key texts
  int64_t dropped_lines = 0, dropped_sequences = 0, total_lines = 0, repeated_keys = 0;
  std::string fatal;  // non-empty: the fatal error's message
  int64_t fatal_offset = -1, fatal_line = 0, fatal_column = 0;
};

CtfIndexResult index_ctf(int fd, int64_t size, bool force_line_mode, const std::vector<AliasSpec>& aliases,
                         int defining_stream, bool count_lines, bool keep_empty_lines, bool require_all_inputs,
                         int64_t chunk_size, int threads, int64_t parallel_min_bytes) {
  IndexOptions options;
  options.force_line_mode = force_line_mode;
  options.aliases = to_aliases(aliases);
  if (defining_stream < -1 || defining_stream >= static_cast<int>(options.aliases.size()))
    throw nb::value_error("defining_stream out of range");
  if (fd < 0 || size < 0) throw nb::value_error("invalid file descriptor or size");
  if (chunk_size <= 0) throw nb::value_error("chunk_size must be positive");
  options.defining_stream = defining_stream;
  options.count_lines = count_lines;
  options.keep_empty_lines = keep_empty_lines;
  options.require_all_inputs = require_all_inputs;
  options.chunk_size = chunk_size;
  if (threads < 1 || parallel_min_bytes < 0) throw nb::value_error("invalid thread count or size threshold");
  options.threads = threads;
  options.parallel_min_bytes = parallel_min_bytes;
  IndexResult r;
  {
    nb::gil_scoped_release release;
    r = cntkio::ctf::index_file(fd, size, options);
  }
  CtfIndexResult out;
  out.mode = static_cast<int>(r.mode);
  out.begin = r.begin;
  out.offsets = numpy_object(std::move(r.offsets));
  out.ends = numpy_object(std::move(r.ends));
  out.lengths = numpy_object(std::move(r.lengths));
  out.keys = numpy_object(std::move(r.keys));
  out.key_blob = numpy_object(std::vector<uint8_t>(r.key_blob.begin(), r.key_blob.end()));
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.chunk_starts = numpy_object(std::move(r.chunk_starts));
  out.chunk_first_lines = numpy_object(std::move(r.chunk_first_lines));
  out.errors = nb::cast(to_columns(std::move(r.errors), r.error_keys));
  out.dropped_lines = r.dropped_lines;
  out.dropped_sequences = r.dropped_sequences;
  out.total_lines = r.total_lines;
  out.repeated_keys = r.repeated_keys;
  out.fatal = std::move(r.fatal);
  out.fatal_offset = r.fatal_offset;
  out.fatal_line = r.fatal_line;
  out.fatal_column = r.fatal_column;
  return out;
}

template <class T>
nb::tuple parse_typed(int fd, int64_t start, int64_t size, int64_t first_line, const int64_t* starts,
                      const int64_t* ends, const int64_t* lengths, int64_t n, const ParseOptions& options,
                      int threads) {
  ParseResult<T> r;
  {
    nb::gil_scoped_release release;
    r = parse_file_range<T>(fd, start, size, first_line, starts, ends, lengths, n, options, threads);
  }
  nb::list streams;
  for (size_t i = 0; i < r.streams.size(); ++i) {
    StreamBuffers<T>& b = r.streams[i];
    const Alias& alias = options.aliases[i];
    if (alias.sparse) {
      streams.append(nb::make_tuple(to_numpy(std::move(b.values)), to_numpy(std::move(b.indices)),
                                    to_numpy(std::move(b.indptr)), to_numpy(std::move(b.seq_offsets))));
    } else {
      const size_t samples = static_cast<size_t>(b.samples);
      b.values.resize(samples * alias.dim);
      streams.append(nb::make_tuple(to_numpy(std::move(b.values), {samples, static_cast<size_t>(alias.dim)}),
                                    to_numpy(std::move(b.seq_offsets))));
    }
  }
  return nb::make_tuple(streams, to_columns(std::move(r.errors)), std::move(r.stats));
}

// Reads [start, end) of the file and parses the sequences [starts[i], ends[i]) (relative to start); `lengths`, their
// sample counts from the index, size the output buffers up front.
nb::tuple parse_file(int fd, int64_t start, int64_t end, int64_t first_line, OffsetArray starts, OffsetArray ends,
                     int mode, const std::vector<AliasSpec>& aliases, bool double_precision, bool sort_sparse,
                     int threads, std::optional<OffsetArray> lengths) {
  if (threads < 1 || threads > 256) throw nb::value_error("threads must be in [1, 256]");
  if (starts.shape(0) != ends.shape(0)) throw nb::value_error("starts and ends differ in length");
  if (mode < 0 || mode > 2) throw nb::value_error("mode must be 0 (line), 1 (numeric) or 2 (text)");
  if (fd < 0 || start < 0 || end < start) throw nb::value_error("invalid file range");
  const int64_t n = static_cast<int64_t>(starts.shape(0));
  const int64_t size = end - start;
  for (int64_t i = 0; i < n; ++i) {
    if (starts.data()[i] < 0 || starts.data()[i] > ends.data()[i] || ends.data()[i] > size)
      throw nb::value_error("sequence byte range outside the chunk");
  }
  const int64_t* counts = nullptr;
  if (lengths) {
    if (static_cast<int64_t>(lengths->shape(0)) != n) throw nb::value_error("lengths and starts differ in length");
    counts = lengths->data();
    if (std::any_of(counts, counts + n, [](int64_t v) { return v < 0; })) throw nb::value_error("negative length");
  }
  ParseOptions options;
  options.mode = static_cast<IdMode>(mode);
  options.aliases = to_aliases(aliases);
  options.sort_sparse = sort_sparse;
  if (double_precision) {
    return parse_typed<double>(fd, start, size, first_line, starts.data(), ends.data(), counts, n, options, threads);
  }
  return parse_typed<float>(fd, start, size, first_line, starts.data(), ends.data(), counts, n, options, threads);
}

}  // namespace

void bind_ctf(nb::module_& m) {
  nb::class_<CtfErrors>(m, "CtfErrors",
                        "Counted errors of a CTF index or parse, a read-only column per field (no object per error).")
      .def_prop_ro("offset", [](const CtfErrors& e) { return e.offset; }, nb::rv_policy::automatic, "byte offset of each error in the file")
      .def_prop_ro("kind", [](const CtfErrors& e) { return e.kind; }, nb::rv_policy::automatic, "ErrorKind of each error")
      .def_prop_ro("stream", [](const CtfErrors& e) { return e.stream; }, nb::rv_policy::automatic, "stream of each error (-1: none)")
      .def_prop_ro("sequence", [](const CtfErrors& e) { return e.sequence; }, nb::rv_policy::automatic, "sequence of each error within the parsed range (-1: index errors)")
      .def_prop_ro("line", [](const CtfErrors& e) { return e.line; }, nb::rv_policy::automatic, "1-based line")
      .def_prop_ro("column", [](const CtfErrors& e) { return e.column; }, nb::rv_policy::automatic, "1-based column (bytes)")
      .def_prop_ro("byte", [](const CtfErrors& e) { return e.byte; }, nb::rv_policy::automatic, "the byte at the offset (-1: end of line)")
      .def_prop_ro("record", [](const CtfErrors& e) { return e.record; }, nb::rv_policy::automatic, "first byte of the bad record (the dropped sequence)")
      .def_prop_ro("end", [](const CtfErrors& e) { return e.end; }, nb::rv_policy::automatic, "end of the bad record's bytes")
      .def_prop_ro("key_blob", [](const CtfErrors& e) { return e.key_blob; }, nb::rv_policy::automatic, "index errors: their sequences' key texts, back to back")
      .def_prop_ro("key_offsets", [](const CtfErrors& e) { return e.key_offsets; }, nb::rv_policy::automatic, "index errors: key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def("__len__", [](const CtfErrors& e) { return e.offset.shape(0); });
  nb::class_<CtfIndexResult>(m, "CtfIndexResult", "The index of a CTF file (ctf_index), read-only.")
      .def_ro("mode", &CtfIndexResult::mode, "IdMode of the file: 0 line, 1 numeric ids, 2 text ids")
      .def_ro("begin", &CtfIndexResult::begin, "first data byte (past a byte order mark and leading whitespace)")
      .def_ro("offsets", &CtfIndexResult::offsets, "int64: first byte of each kept sequence")
      .def_ro("ends", &CtfIndexResult::ends, "int64: end of each kept sequence's bytes")
      .def_ro("lengths", &CtfIndexResult::lengths, "int32: samples of each kept sequence")
      .def_ro("keys", &CtfIndexResult::keys, "uint64: numeric keys (the line number in line mode)")
      .def_ro("key_blob", &CtfIndexResult::key_blob, "uint8: text ids, back to back")
      .def_ro("key_offsets", &CtfIndexResult::key_offsets, "int64: text id i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("chunk_starts", &CtfIndexResult::chunk_starts, "int64: first sequence of each chunk, then the sequence count")
      .def_ro("chunk_first_lines", &CtfIndexResult::chunk_first_lines, "int64: 0-based line of each chunk's first sequence")
      .def_ro("errors", &CtfIndexResult::errors, "CtfErrors: the counted errors (their sequences were dropped)")
      .def_ro("dropped_lines", &CtfIndexResult::dropped_lines, "lines without the defining stream, or empty (line mode)")
      .def_ro("dropped_sequences", &CtfIndexResult::dropped_sequences, "id-mode sequences without the defining stream")
      .def_ro("total_lines", &CtfIndexResult::total_lines, "lines of the file (when counted)")
      .def_ro("repeated_keys", &CtfIndexResult::repeated_keys, "sequences whose id an earlier sequence already used")
      .def_ro("fatal", &CtfIndexResult::fatal, "the fatal error's message, or '' (none)")
      .def_ro("fatal_offset", &CtfIndexResult::fatal_offset, "byte offset of the fatal error (-1: none)")
      .def_ro("fatal_line", &CtfIndexResult::fatal_line, "1-based line of the fatal error (0: unknown)")
      .def_ro("fatal_column", &CtfIndexResult::fatal_column, "1-based column of the fatal error (0: unknown)");
  nb::class_<ParseStats>(m, "CtfParseStats", "What ctf_parse noted in a chunk (read-only): zero-padded dense samples "
                            "and samples of inputs not configured, with the first of each.")
      .def_ro("padded_samples", &ParseStats::padded_samples, "dense samples with fewer values than their dimension")
      .def_ro("first_padded_offset", &ParseStats::first_padded_offset, "byte offset of the first (-1: none)")
      .def_ro("first_padded_line", &ParseStats::first_padded_line, "its 1-based line")
      .def_ro("first_padded_column", &ParseStats::first_padded_column, "its 1-based column")
      .def_ro("unknown_inputs", &ParseStats::unknown_inputs, "samples of inputs not in the configuration (skipped)")
      .def_ro("first_unknown_offset", &ParseStats::first_unknown_offset, "byte offset of the first (-1: none)")
      .def_ro("first_unknown_line", &ParseStats::first_unknown_line, "its 1-based line")
      .def_ro("first_unknown_column", &ParseStats::first_unknown_column, "its 1-based column");
  m.def("ctf_index", &index_ctf, "fd"_a, "size"_a, "force_line_mode"_a, "aliases"_a, "defining_stream"_a,
        "count_lines"_a, "keep_empty_lines"_a, "require_all_inputs"_a, "chunk_size"_a, "threads"_a = 1,
        "parallel_min_bytes"_a = int64_t{64} << 20,
        "Index the CTF file open as fd, reading it with pread (GIL released); a file of at least parallel_min_bytes "
        "is indexed in up to `threads` parts at once (split where a sequence starts), with the same result: a "
        "CtfIndexResult.");
  m.def("ctf_parse", &parse_file, "fd"_a, "start"_a, "end"_a, "first_line"_a, "starts"_a, "ends"_a, "mode"_a,
        "aliases"_a, "double_precision"_a, "sort_sparse"_a, "threads"_a = 1, "lengths"_a = nb::none(),
        "Read bytes [start, end) of the file and parse the given sequences into flat NumPy buffers (GIL released), "
        "on up to `threads` threads (runs of sequences of about equal bytes, joined: the same result); `lengths` "
        "(int64, the index's sample counts) size the output buffers up front. Returns (streams: per stream "
        "(values, indices, indptr, seq_offsets) when sparse, (values (samples, dim), seq_offsets) when dense; "
        "CtfErrors; CtfParseStats).");
}
