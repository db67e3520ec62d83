// Python bindings of the native module cntkio._native: the CTF indexer and parser (reading the file
// with pread), the chunk slots and minibatch gather, and CNTK's block randomization.
// Every entry point checks its arguments; the GIL is released while the byte-level loops run.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "assemble.hpp"
#include "buffer.hpp"
#include "buffer_pool.hpp"
#include "cbf.hpp"
#include "ctf.hpp"
#include "file_io.hpp"
#include "keys.hpp"
#include "numpy_out.hpp"
#include "randomizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::ctf;

namespace {

using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using OffsetArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using IndexArray = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using FlagArray = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using AliasSpec = std::tuple<std::string, bool, uint64_t>;

// Moves a byte vector into a NumPy array of the given element type and shape.
template <class A = std::allocator<char>>
nb::ndarray<nb::numpy> bytes_to_numpy(std::vector<char, A>&& bytes, nb::dlpack::dtype dtype, std::vector<size_t> shape) {
  auto* owned = new std::vector<char, A>(std::move(bytes));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<char, A>*>(p); });
  return nb::ndarray<nb::numpy>(owned->data(), shape.size(), shape.data(), owner, nullptr, dtype);
}

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

nb::dict index_ctf(int fd, int64_t size, bool force_line_mode, const std::vector<AliasSpec>& aliases,
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
  nb::dict d;
  d["mode"] = static_cast<int>(r.mode);
  d["begin"] = r.begin;
  d["offsets"] = to_numpy(std::move(r.offsets));
  d["ends"] = to_numpy(std::move(r.ends));
  d["lengths"] = to_numpy(std::move(r.lengths));
  d["keys"] = to_numpy(std::move(r.keys));
  d["key_blob"] = to_numpy(std::vector<uint8_t>(r.key_blob.begin(), r.key_blob.end()));
  d["key_offsets"] = to_numpy(std::move(r.key_offsets));
  d["chunk_starts"] = to_numpy(std::move(r.chunk_starts));
  d["chunk_first_lines"] = to_numpy(std::move(r.chunk_first_lines));
  d["errors"] = to_columns(std::move(r.errors), r.error_keys);
  d["dropped_lines"] = r.dropped_lines;
  d["dropped_sequences"] = r.dropped_sequences;
  d["total_lines"] = r.total_lines;
  d["repeated_keys"] = r.repeated_keys;
  d["fatal"] = r.fatal;
  d["fatal_offset"] = r.fatal_offset;
  d["fatal_line"] = r.fatal_line;
  d["fatal_column"] = r.fatal_column;
  return d;
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
  nb::dict stats;
  stats["padded_samples"] = r.stats.padded_samples;
  stats["first_padded_offset"] = r.stats.first_padded_offset;
  stats["unknown_inputs"] = r.stats.unknown_inputs;
  stats["first_unknown_offset"] = r.stats.first_unknown_offset;
  stats["first_padded_line"] = r.stats.first_padded_line;
  stats["first_padded_column"] = r.stats.first_padded_column;
  stats["first_unknown_line"] = r.stats.first_unknown_line;
  stats["first_unknown_column"] = r.stats.first_unknown_column;
  return nb::make_tuple(streams, to_columns(std::move(r.errors)), stats);
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

nb::tuple compat_order(const std::vector<int64_t>& units_per_chunk, const std::vector<int64_t>& samples_per_chunk,
                       int64_t window, bool sample_window, uint64_t seed) {
  if (units_per_chunk.size() != samples_per_chunk.size()) throw nb::value_error("chunk lists differ in length");
  if (units_per_chunk.empty()) throw nb::value_error("no chunks");
  for (size_t i = 0; i < units_per_chunk.size(); ++i) {
    if (units_per_chunk[i] <= 0 || samples_per_chunk[i] < 0) throw nb::value_error("a chunk has no units");
  }
  if (window < 0) throw nb::value_error("window must be >= 0");
  randomizer::CompatOrder r;
  {
    nb::gil_scoped_release release;
    r = randomizer::compat_block_order(units_per_chunk, samples_per_chunk, window, sample_window, seed);
  }
  return nb::make_tuple(to_numpy(std::move(r.units)), to_numpy(std::move(r.chunk_order)),
                        to_numpy(std::move(r.window_begin)), to_numpy(std::move(r.window_end)));
}

// `bytes` of uninitialised memory as a uint8 array, returned to the pool of reusable buffers when NumPy frees it.
nb::ndarray<nb::numpy, uint8_t> reusable_buffer(int64_t bytes) {
  if (bytes < 0) throw nb::value_error("bytes must be >= 0");
  void* block = pool::take(static_cast<size_t>(bytes));
  struct Owned {
    void* block;
    size_t bytes;
  };
  auto* owned = new Owned{block, static_cast<size_t>(bytes)};
  nb::capsule owner(owned, [](void* p) noexcept {
    auto* o = static_cast<Owned*>(p);
    pool::give(o->block, o->bytes);
    delete o;
  });
  const size_t shape[1] = {static_cast<size_t>(bytes)};
  return nb::ndarray<nb::numpy, uint8_t>(block, 1, shape, owner);
}

// Gives the heap pages malloc keeps free back to the system (glibc's malloc_trim; nothing elsewhere). Freed chunk
// buffers of tens of MB come from the heap once malloc's adaptive threshold has grown past them, and their pages
// stay resident until trimmed: a source under a memory budget trims after dropping chunks.
void release_free_memory() {
#ifdef __GLIBC__
  nb::gil_scoped_release release;
  malloc_trim(0);
#endif
}

nb::ndarray<nb::numpy, int64_t> stable_argsort(nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu> keys) {
  std::vector<int64_t> order;
  std::string error;
  {
    nb::gil_scoped_release release;
    try {
      order = randomizer::stable_argsort(keys.data(), static_cast<int64_t>(keys.shape(0)));
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
  }
  if (!error.empty()) throw nb::value_error(error.c_str());
  return to_numpy(std::move(order));
}

using I64Vector = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using F64Vector = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

nb::ndarray<nb::numpy, double> default_unit_keys(uint64_t seed, uint64_t sweep, I64Vector chunks, I64Vector counts,
                                                 F64Vector starts, double window) {
  const size_t n = chunks.shape(0);
  if (counts.shape(0) != n || starts.shape(0) != n) throw nb::value_error("chunks, counts and starts differ in length");
  for (size_t i = 0; i < n; ++i) {
    if (chunks.data()[i] < 0 || counts.data()[i] < 0) throw nb::value_error("chunks and counts must be >= 0");
  }
  std::vector<double> keys;
  {
    nb::gil_scoped_release release;
    keys = randomizer::default_unit_keys(seed, sweep, chunks.data(), counts.data(), starts.data(),
                                         static_cast<int64_t>(n), window);
  }
  return to_numpy(std::move(keys));
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

// ------------------------------------------------------------------------------------------ keys

using U64Array = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ByteArray = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A key column from Python: (0, int64 values, None), (1, uint64 values, None) or (2, UTF-8 blob, offsets).
// The arrays stay referenced by the caller's arguments for the duration of the call.
keys::Column to_key_column(const nb::tuple& spec) {
  if (nb::len(spec) != 3) throw nb::value_error("a key column is (kind, values or blob, offsets or None)");
  const int kind = nb::cast<int>(spec[0]);
  keys::Column c;
  if (kind == 0 || kind == 1) {
    U64Array values = exact_array<U64Array>(spec[1], "integer keys (uint64; int64 viewed as uint64)");
    c.kind = kind == 0 ? keys::Column::Kind::signed_int : keys::Column::Kind::unsigned_int;
    c.ints = values.data();
    c.size = static_cast<int64_t>(values.shape(0));
  } else if (kind == 2) {
    ByteArray blob = exact_array<ByteArray>(spec[1], "text keys (uint8 blob)");
    OffsetArray offsets = exact_array<OffsetArray>(spec[2], "text key offsets (int64)");
    if (offsets.shape(0) == 0) throw nb::value_error("text keys need offsets");
    const int64_t* o = offsets.data();
    const int64_t n = static_cast<int64_t>(offsets.shape(0)) - 1;
    for (int64_t i = 0; i < n; ++i) {
      if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > static_cast<int64_t>(blob.shape(0)))
        throw nb::value_error("text key offsets outside the blob");
    }
    c.kind = keys::Column::Kind::text;
    c.blob = blob.data();
    c.offsets = o;
    c.size = n;
  } else {
    throw nb::value_error("unknown key column kind");
  }
  return c;
}

nb::tuple duplicates_to_python(keys::Duplicates&& d) {
  return nb::make_tuple(d.count, to_numpy(std::move(d.examples)));
}

// Joins two key columns: (row of the secondary per primary key or -1 as int32 or int64, duplicate
// count of the secondary, the first duplicate rows).
nb::tuple join_keys(const nb::tuple& primary, const nb::tuple& secondary, bool by_text, bool keep_last) {
  const keys::Column p = to_key_column(primary), s = to_key_column(secondary);
  if (!by_text && (p.kind == keys::Column::Kind::text || s.kind == keys::Column::Kind::text))
    throw nb::value_error("text keys compare as text");
  keys::Join j;
  {
    nb::gil_scoped_release release;
    j = keys::join(p, s, by_text ? keys::Compare::text : keys::Compare::value, keep_last);
  }
  nb::object match = s.size < INT32_MAX ? nb::cast(to_numpy(std::move(j.match32))) : nb::cast(to_numpy(std::move(j.match64)));
  return nb::make_tuple(match, j.duplicates.count, to_numpy(std::move(j.duplicates.examples)));
}

nb::tuple key_duplicates(const nb::tuple& column, bool by_text) {
  const keys::Column c = to_key_column(column);
  if (!by_text && c.kind == keys::Column::Kind::text) throw nb::value_error("text keys compare as text");
  keys::Duplicates d;
  {
    nb::gil_scoped_release release;
    d = keys::duplicates(c, by_text ? keys::Compare::text : keys::Compare::value);
  }
  return duplicates_to_python(std::move(d));
}

nb::ndarray<nb::numpy, uint64_t> cntk_key_hash(const nb::tuple& column) {
  const keys::Column c = to_key_column(column);
  std::vector<uint64_t> hashes;
  {
    nb::gil_scoped_release release;
    hashes = keys::cntk_hash(c);
  }
  return to_numpy(std::move(hashes));
}

// ------------------------------------------------------------------------------------------ assembly

struct StreamLayout {
  assemble::ColumnSpec spec;
  nb::dlpack::dtype dtype;
};

using MatchArray32 = nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Keeps Python objects alive from C++ (released with the GIL held).
std::shared_ptr<void> keep_alive(std::vector<nb::object> objects) {
  auto* held = new std::vector<nb::object>(std::move(objects));
  return std::shared_ptr<void>(held, [](void* p) {
    nb::gil_scoped_acquire acquire;
    delete static_cast<std::vector<nb::object>*>(p);
  });
}

// The loaded chunks of every deserializer of a reader (assemble::Store) and the layouts of their streams.
class ChunkStore {
 public:
  ChunkStore(const std::vector<std::vector<std::tuple<bool, int64_t, char, int64_t>>>& layouts,
             const std::vector<int64_t>& slot_counts) {
    std::vector<std::vector<assemble::ColumnSpec>> specs;
    for (const auto& layout : layouts) {
      specs.emplace_back();
      for (const auto& [sparse, width, kind, itemsize] : layout) {
        if (width <= 0 || itemsize <= 0 || itemsize > 16) throw nb::value_error("invalid stream layout");
        nb::dlpack::dtype dtype{};
        dtype.code = static_cast<uint8_t>(kind == 'f' ? nb::dlpack::dtype_code::Float
                                          : kind == 'i' ? nb::dlpack::dtype_code::Int
                                          : kind == 'u' ? nb::dlpack::dtype_code::UInt
                                          : kind == 'b' ? nb::dlpack::dtype_code::Bool
                                                        : throw nb::value_error("unsupported dtype kind"));
        dtype.bits = static_cast<uint8_t>(itemsize * 8);
        dtype.lanes = 1;
        layout_.push_back({{sparse, width, itemsize}, dtype});
        specs.back().push_back({sparse, width, itemsize});
      }
    }
    try {
      store_ = std::make_unique<assemble::Store>(std::move(specs), slot_counts);
    } catch (const std::invalid_argument& e) {
      throw nb::value_error(e.what());
    }
  }

  // Loads a chunk of deserializer `d` into slot `index`: per stream (values, seq_offsets, indices or None,
  // indptr or None); `rows` (or row0 onwards) are the chunk's rows the slot uses.
  void load(size_t d, int64_t index, const nb::list& columns, int64_t sequences, std::optional<FlagArray> bad,
            int64_t row0, std::optional<OffsetArray> rows, int64_t first_unit, int64_t first_sequence,
            std::optional<OffsetArray> frame_starts) {
    if (d >= store_->deserializers()) throw nb::index_error("deserializer out of range");
    const std::vector<assemble::ColumnSpec>& specs = store_->layout(d);
    const size_t first_stream = stream_offset(d);
    if (nb::len(columns) != specs.size()) throw nb::value_error("wrong number of streams in the chunk");
    if (sequences < 0) throw nb::value_error("negative sequence count");
    std::vector<nb::object> owned;
    auto chunk = std::make_shared<assemble::Chunk>();
    chunk->sequences = sequences;
    for (size_t s = 0; s < specs.size(); ++s) {
      nb::tuple column = nb::cast<nb::tuple>(columns[s]);
      if (nb::len(column) != 4) throw nb::value_error("a column is (values, seq_offsets, indices, indptr)");
      const StreamLayout& layout = layout_[first_stream + s];
      const std::string name = "stream " + std::to_string(s);
      AnyArray values = exact_array<AnyArray>(column[0], name + " values");
      OffsetArray seq_offsets = exact_array<OffsetArray>(column[1], name + " sequence offsets (int64)");
      if (values.dtype() != layout.dtype) throw nb::value_error((name + ": wrong dtype").c_str());
      if (seq_offsets.shape(0) != static_cast<size_t>(sequences + 1))
        throw nb::value_error((name + ": need one sequence offset per sequence, plus one").c_str());
      assemble::Column c;
      c.sparse = layout.spec.sparse;
      c.width = layout.spec.width;
      c.itemsize = layout.spec.itemsize;
      c.values = static_cast<const char*>(values.data());
      c.seq_offsets = seq_offsets.data();
      if (c.sparse) {
        IndexArray indices = exact_array<IndexArray>(column[2], name + " indices (int32)");
        OffsetArray indptr = exact_array<OffsetArray>(column[3], name + " indptr (int64)");
        if (values.ndim() != 1 || indices.shape(0) != values.shape(0) || indptr.shape(0) == 0)
          throw nb::value_error((name + ": malformed CSR arrays").c_str());
        c.indices = indices.data();
        c.indptr = indptr.data();
        c.samples = static_cast<int64_t>(indptr.shape(0)) - 1;
        c.nnz = static_cast<int64_t>(values.shape(0));
        c.per_sample = assemble::uniform_entries(c.indptr, c.samples);
      } else {
        if (values.ndim() != 2 || static_cast<int64_t>(values.shape(1)) != c.width)
          throw nb::value_error((name + ": dense values must be (samples, width)").c_str());
        c.samples = static_cast<int64_t>(values.shape(0));
      }
      for (int k = 0; k < 4; ++k) owned.push_back(nb::borrow(column[k]));
      chunk->columns.push_back(c);
    }
    if (bad) chunk->bad.assign(bad->data(), bad->data() + bad->shape(0));
    chunk->owner = keep_alive(std::move(owned));
    auto slot = std::make_shared<assemble::Slot>();
    slot->chunk = chunk;
    slot->row0 = row0;
    if (rows) slot->rows.assign(rows->data(), rows->data() + rows->shape(0));
    slot->first_unit = first_unit;
    slot->first_sequence = first_sequence;
    if (frame_starts) slot->frame_starts.assign(frame_starts->data(), frame_starts->data() + frame_starts->shape(0));
    std::string failure;
    {
      nb::gil_scoped_release release;
      try {
        store_->load(d, index, std::move(slot));
      } catch (const std::invalid_argument& e) {
        failure = e.what();
      } catch (const std::out_of_range& e) {
        failure = std::string("index:") + e.what();
      }
    }
    if (failure.rfind("index:", 0) == 0) throw nb::index_error(failure.c_str() + 6);
    if (!failure.empty()) throw nb::value_error(failure.c_str());
  }

  void clear(size_t d, int64_t index) {
    try {
      store_->clear(d, index);
    } catch (const std::out_of_range& e) {
      throw nb::index_error(e.what());
    }
  }

  // Secondary `d`: per corpus sequence its sequence (int32 or int64), and its chunks' first sequences.
  void set_lookup(size_t d, const nb::object& match, OffsetArray chunk_starts) {
    assemble::Lookup lookup;
    if (nb::isinstance<MatchArray32>(match)) {
      MatchArray32 m = exact_array<MatchArray32>(match, "match");
      lookup.match32 = m.data();
      lookup.sequences = static_cast<int64_t>(m.shape(0));
    } else {
      OffsetArray m = exact_array<OffsetArray>(match, "match (int32 or int64)");
      lookup.match64 = m.data();
      lookup.sequences = static_cast<int64_t>(m.shape(0));
    }
    if (chunk_starts.shape(0) == 0) throw nb::value_error("chunk starts must not be empty");
    lookup.chunk_starts = chunk_starts.data();
    lookup.chunks = static_cast<int64_t>(chunk_starts.shape(0)) - 1;
    lookup.owner = keep_alive({match, nb::cast(chunk_starts)});
    try {
      store_->set_lookup(d, std::move(lookup));
    } catch (const std::invalid_argument& e) {
      throw nb::value_error(e.what());
    }
  }

  void set_versions(size_t d, int64_t versions) {
    try {
      store_->set_versions(d, versions);
    } catch (const std::invalid_argument& e) {
      throw nb::value_error(e.what());
    }
  }

  void set_broadcast(size_t d) {
    try {
      store_->set_broadcast(d);
    } catch (const std::invalid_argument& e) {
      throw nb::value_error(e.what());
    }
  }

  void set_caps(std::optional<OffsetArray> caps) {
    if (!caps) {
      store_->set_caps(nullptr, 0, nullptr);
      return;
    }
    store_->set_caps(caps->data(), static_cast<int64_t>(caps->shape(0)), keep_alive({nb::cast(*caps)}));
  }

  // (streams of every deserializer, keep or None, short (unit, stream, row) or None, missing [(d, slot)] or None)
  nb::tuple gather(IndexArray chunk, OffsetArray unit, std::optional<OffsetArray> offset,
                   std::optional<OffsetArray> count, int kind, std::optional<FlagArray> version) {
    const size_t n = chunk.shape(0);
    if (unit.shape(0) != n) throw nb::value_error("chunk and unit arrays differ in length");
    if (version && version->shape(0) != n) throw nb::value_error("version must have one entry per unit");
    if (kind < 0 || kind > 2) throw nb::value_error("kind must be 0 (sequences), 1 (frames) or 2 (pieces)");
    if (kind == 2 && (!offset || !count || offset->shape(0) != n || count->shape(0) != n))
      throw nb::value_error("pieces need offset and count arrays of the same length");
    assemble::Request request;
    request.chunk = chunk.data();
    request.unit = unit.data();
    request.offset = kind == 2 ? offset->data() : nullptr;
    request.count = kind == 2 ? count->data() : nullptr;
    request.version = version ? version->data() : nullptr;
    request.n = static_cast<int64_t>(n);
    request.kind = static_cast<assemble::UnitKind>(kind);
    assemble::GatherResult r;
    std::string failure;
    {
      nb::gil_scoped_release release;
      try {
        r = store_->gather(request);
      } catch (const std::invalid_argument& e) {
        failure = e.what();
      }
    }
    if (!failure.empty()) throw nb::value_error(failure.c_str());
    if (!r.missing.empty()) {
      nb::list missing;
      for (const auto& [d, slot] : r.missing) missing.append(nb::make_tuple(d, slot));
      return nb::make_tuple(nb::none(), nb::none(), nb::none(), missing);
    }
    if (r.short_unit >= 0) {
      return nb::make_tuple(nb::none(), nb::none(), nb::make_tuple(r.short_unit, r.short_stream, r.short_row), nb::none());
    }
    nb::list streams;
    for (size_t s = 0; s < layout_.size(); ++s) {
      assemble::StreamOut& out = r.streams[s];
      const StreamLayout& layout = layout_[s];
      const size_t itemsize = static_cast<size_t>(layout.spec.itemsize);
      if (layout.spec.sparse) {
        const size_t entries = out.values.size() / itemsize;
        streams.append(nb::make_tuple(bytes_to_numpy(std::move(out.values), layout.dtype, {entries}),
                                      to_numpy(std::move(out.lengths)), to_numpy(std::move(out.indices)),
                                      to_numpy(std::move(out.indptr))));
      } else {
        const size_t width = static_cast<size_t>(layout.spec.width);
        const size_t samples = out.values.size() / (itemsize * width);
        streams.append(nb::make_tuple(bytes_to_numpy(std::move(out.values), layout.dtype, {samples, width}),
                                      to_numpy(std::move(out.lengths)), nb::none(), nb::none()));
      }
    }
    nb::object keep = r.keep.empty() ? nb::none() : nb::cast(to_numpy(std::move(r.keep)));
    return nb::make_tuple(streams, keep, nb::none(), nb::none());
  }

 private:
  size_t stream_offset(size_t d) const {
    size_t offset = 0;
    for (size_t k = 0; k < d; ++k) offset += store_->layout(k).size();
    return offset;
  }

  std::vector<StreamLayout> layout_;  // every stream, deserializer after deserializer
  std::unique_ptr<assemble::Store> store_;
};

// ------------------------------------------------------------------------------------------------ CBF

nb::handle cbf_error_type;  // cntkio._native.CbfError(ValueError), args (message, offset, chunk, sequence, stream)

[[noreturn]] void raise_cbf(const cbf::CbfError& e) {
  nb::object args = nb::make_tuple(e.what(), e.offset, e.chunk, e.sequence, e.stream);
  PyErr_SetObject(cbf_error_type.ptr(), args.ptr());
  throw nb::python_error();
}

// A CBF file open as `fd` (owned by the caller): its header, chunk table and sequence lengths are read
// at construction; chunks are decoded on request (GIL released).
class CbfFile {
 public:
  CbfFile(int fd, int64_t size) : fd_(fd) {
    std::optional<cbf::CbfError> failure;
    {
      nb::gil_scoped_release release;
      try {
        header_ = cbf::read_header(fd, size);
        lengths_ = cbf::read_lengths(fd, header_);
        first_sequence_.assign(1, 0);
        for (const uint32_t n : header_.chunk_sequences) first_sequence_.push_back(first_sequence_.back() + n);
      } catch (const cbf::CbfError& e) {
        failure = e;
      }
    }
    if (failure) raise_cbf(*failure);
  }

  nb::list streams() const {
    nb::list out;
    for (const cbf::Stream& s : header_.streams) out.append(nb::make_tuple(s.name, s.sparse, s.is_double, s.dim));
    return out;
  }

  nb::tuple chunks() const {
    std::vector<int64_t> offsets(header_.chunk_offsets), sequences, samples;
    for (const uint32_t n : header_.chunk_sequences) sequences.push_back(n);
    for (const uint32_t n : header_.chunk_samples) samples.push_back(n);
    return nb::make_tuple(to_numpy(std::move(offsets)), to_numpy(std::move(sequences)), to_numpy(std::move(samples)));
  }

  nb::ndarray<nb::numpy, uint32_t> lengths() const { return to_numpy(std::vector<uint32_t>(lengths_)); }

  // Per stream (values, seq_offsets, indices or None, indptr or None); dense values are (samples, dim).
  nb::list decode(int64_t chunk) const {
    if (chunk < 0 || chunk >= static_cast<int64_t>(header_.chunk_sequences.size())) throw nb::index_error("chunk out of range");
    std::vector<cbf::Column> columns;
    std::optional<cbf::CbfError> failure;
    std::string io_failure;
    {
      nb::gil_scoped_release release;
      try {
        columns = cbf::decode_chunk(fd_, header_, chunk, lengths_.data() + first_sequence_[chunk]);
      } catch (const cbf::CbfError& e) {
        failure = e;
      } catch (const std::runtime_error& e) {
        io_failure = e.what();
      }
    }
    if (failure) raise_cbf(*failure);
    if (!io_failure.empty()) throw std::runtime_error(io_failure);
    nb::list out;
    for (size_t s = 0; s < columns.size(); ++s) {
      const cbf::Stream& stream = header_.streams[s];
      cbf::Column& c = columns[s];
      nb::dlpack::dtype dtype = stream.is_double ? nb::dtype<double>() : nb::dtype<float>();
      const size_t item = stream.is_double ? 8 : 4;
      if (stream.sparse) {
        const size_t nnz = c.values.size() / item;
        out.append(nb::make_tuple(bytes_to_numpy(std::move(c.values), dtype, {nnz}), to_numpy(std::move(c.seq_offsets)),
                                  to_numpy(std::move(c.indices)), to_numpy(std::move(c.indptr))));
      } else {
        const size_t samples = c.values.size() / (item * stream.dim);
        out.append(nb::make_tuple(bytes_to_numpy(std::move(c.values), dtype, {samples, static_cast<size_t>(stream.dim)}),
                                  to_numpy(std::move(c.seq_offsets)), nb::none(), nb::none()));
      }
    }
    return out;
  }

 private:
  int fd_;
  cbf::Header header_;
  std::vector<uint32_t> lengths_;
  std::vector<int64_t> first_sequence_;  // of each chunk, in lengths_
};

// The CBF blocks of sequences [first, last) of every stream of a chunk: per stream
// (values, seq_offsets, indices or None, indptr or None); returns one uint8 array per stream.
nb::list cbf_encode(const nb::list& columns, int64_t first, int64_t last) {
  struct Input {
    bool sparse;
    int64_t dim, itemsize;
    const char* values;
    const int32_t* indices;
    const int64_t* indptr;
    const int64_t* seq_offsets;
  };
  std::vector<Input> inputs;
  for (size_t s = 0; s < nb::len(columns); ++s) {
    nb::tuple column = nb::cast<nb::tuple>(columns[s]);
    const std::string name = "stream " + std::to_string(s);
    AnyArray values = exact_array<AnyArray>(column[0], name + " values");
    OffsetArray seq_offsets = exact_array<OffsetArray>(column[1], name + " sequence offsets (int64)");
    const size_t item = values.itemsize();
    if (values.dtype().code != static_cast<uint8_t>(nb::dlpack::dtype_code::Float) || (item != 4 && item != 8))
      throw nb::value_error((name + ": values must be float32 or float64").c_str());
    if (first < 0 || last < first || last >= static_cast<int64_t>(seq_offsets.shape(0)))
      throw nb::value_error((name + ": sequence range outside the chunk").c_str());
    Input in{false, 0, static_cast<int64_t>(item), static_cast<const char*>(values.data()), nullptr, nullptr,
             seq_offsets.data()};
    const int64_t samples = seq_offsets.data()[seq_offsets.shape(0) - 1];
    if (column[2].is_none()) {
      if (values.ndim() != 2) throw nb::value_error((name + ": dense values must be (samples, dim)").c_str());
      in.dim = static_cast<int64_t>(values.shape(1));
      if (static_cast<int64_t>(values.shape(0)) < samples) throw nb::value_error((name + ": fewer rows than samples").c_str());
    } else {
      IndexArray indices = exact_array<IndexArray>(column[2], name + " indices (int32)");
      OffsetArray indptr = exact_array<OffsetArray>(column[3], name + " indptr (int64)");
      in.sparse = true;
      in.indices = indices.data();
      in.indptr = indptr.data();
      if (static_cast<int64_t>(indptr.shape(0)) < samples + 1 || indices.shape(0) != values.shape(0) ||
          indptr.data()[samples] > static_cast<int64_t>(values.shape(0)))
        throw nb::value_error((name + ": malformed CSR arrays").c_str());
    }
    for (int64_t q = first; q < last; ++q) {
      if (seq_offsets.data()[q + 1] < seq_offsets.data()[q]) throw nb::value_error((name + ": sequence offsets decrease").c_str());
    }
    inputs.push_back(in);
  }
  std::vector<std::vector<char>> blocks(inputs.size());
  {
    nb::gil_scoped_release release;
    for (size_t s = 0; s < inputs.size(); ++s) {
      const Input& in = inputs[s];
      cbf::encode_stream(blocks[s], in.sparse, in.dim, in.itemsize, in.values, in.indices, in.indptr, in.seq_offsets,
                         first, last);
    }
  }
  nb::list out;
  for (auto& block : blocks) {
    const size_t size = block.size();
    out.append(bytes_to_numpy(std::move(block), nb::dtype<uint8_t>(), {size}));
  }
  return out;
}

}  // namespace

void bind_records(nb::module_& m);  // records_bindings.cpp
void bind_mlf(nb::module_& m);      // mlf_bindings.cpp
void bind_scp(nb::module_& m);      // scp_bindings.cpp
void bind_htk(nb::module_& m);      // htk_bindings.cpp
void bind_image_index(nb::module_& m);  // image_index_bindings.cpp
void bind_image_pixels(nb::module_& m);  // image_pixels_bindings.cpp

NB_MODULE(_native, m) {
  m.doc() = "Native core of cntkio: CTF indexer and parser, minibatch assembly, CNTK block randomization.";
  bind_records(m);
  bind_mlf(m);
  bind_scp(m);
  bind_htk(m);
  bind_image_index(m);
  bind_image_pixels(m);
  cbf_error_type = nb::exception<cbf::CbfError>(m, "CbfError", PyExc_ValueError);
  nb::class_<CbfFile>(m, "CbfFile")
      .def(nb::init<int, int64_t>(), "fd"_a, "size"_a)
      .def("streams", &CbfFile::streams)
      .def("chunks", &CbfFile::chunks)
      .def("lengths", &CbfFile::lengths)
      .def("decode", &CbfFile::decode, "chunk"_a);
  m.def("cbf_encode", &cbf_encode, "columns"_a, "first"_a, "last"_a,
        "CBF stream blocks of sequences [first, last) of a chunk's columns, one uint8 array per stream.");
  nb::exception<ShortRead>(m, "ShortRead", PyExc_EOFError);
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
  m.def("ctf_index", &index_ctf, "fd"_a, "size"_a, "force_line_mode"_a, "aliases"_a, "defining_stream"_a,
        "count_lines"_a, "keep_empty_lines"_a, "require_all_inputs"_a, "chunk_size"_a, "threads"_a = 1,
        "parallel_min_bytes"_a = int64_t{64} << 20,
        "Index the CTF file open as fd, reading it with pread (GIL released); a file of at least parallel_min_bytes "
        "is indexed in up to `threads` parts at once (split where a sequence starts), with the same result.");
  m.def("ctf_parse", &parse_file, "fd"_a, "start"_a, "end"_a, "first_line"_a, "starts"_a, "ends"_a, "mode"_a,
        "aliases"_a, "double_precision"_a, "sort_sparse"_a, "threads"_a = 1, "lengths"_a = nb::none(),
        "Read bytes [start, end) of the file and parse the given sequences into flat NumPy buffers (GIL released), "
        "on up to `threads` threads (runs of sequences of about equal bytes, joined: the same result); `lengths` "
        "(int64, the index's sample counts) size the output buffers up front.");
  m.def("join_keys", &join_keys, "primary"_a, "secondary"_a, "by_text"_a, "keep_last"_a,
        "Join key columns (kind, values|blob, offsets|None) with a hash table (GIL released): (match, "
        "duplicates in the secondary, first duplicate rows).");
  m.def("key_duplicates", &key_duplicates, "column"_a, "by_text"_a,
        "Keys of a column that occur more than once: (count, first duplicate rows).");
  m.def("cntk_key_hash", &cntk_key_hash, "column"_a, "CNTK's 64-bit sequence-key hash of every key's text.");
  m.def("compat_block_order", &compat_order, "units_per_chunk"_a, "samples_per_chunk"_a, "window"_a,
        "sample_window"_a, "seed"_a,
        "CNTK's BlockRandomizer order of one sweep (MT19937-64): (units, chunk_order, window_begin, window_end).");
  m.def("reusable_buffer", &reusable_buffer, "bytes"_a,
        "Uninitialised bytes (uint8 array) from a pool of buffers that chunks give back when they are freed.");
  m.def("default_unit_keys", &default_unit_keys, "seed"_a, "sweep"_a, "chunks"_a, "counts"_a, "starts"_a, "window"_a,
        "Keys of the default randomization: start + window * default_rng([seed, sweep, chunk]).random(count) of each "
        "chunk, kept below start + window, concatenated (float64).");
  m.def("release_free_memory", &release_free_memory,
        "Returns the heap's free pages to the system (glibc malloc_trim; no-op elsewhere), GIL released.");
  m.def("stable_argsort", &stable_argsort, "keys"_a,
        "The permutation sorting float64 keys, equal keys in their order (argsort(kind='stable')), by radix sort.");
  nb::class_<ChunkStore>(m, "ChunkStore")
      .def(nb::init<const std::vector<std::vector<std::tuple<bool, int64_t, char, int64_t>>>&, const std::vector<int64_t>&>(),
           "layouts"_a, "slot_counts"_a)
      .def("load", &ChunkStore::load, "deserializer"_a, "index"_a, "columns"_a, "sequences"_a, "bad"_a.none(),
           "row0"_a, "rows"_a.none(), "first_unit"_a, "first_sequence"_a, "frame_starts"_a.none())
      .def("clear", &ChunkStore::clear, "deserializer"_a, "index"_a)
      .def("set_lookup", &ChunkStore::set_lookup, "deserializer"_a, "match"_a, "chunk_starts"_a)
      .def("set_broadcast", &ChunkStore::set_broadcast, "deserializer"_a,
           "Secondary `deserializer` holds one sample per sequence, repeated to the primary's length.")
      .def("set_caps", &ChunkStore::set_caps, "caps"_a.none())
      .def("set_versions", &ChunkStore::set_versions, "deserializer"_a, "versions"_a,
           "Deserializer `deserializer` keeps `versions` copies of each chunk (slot = chunk * versions + version).")
      .def("gather", &ChunkStore::gather, "chunk"_a, "unit"_a, "offset"_a.none(), "count"_a.none(), "kind"_a,
           "version"_a.none() = nb::none());
}
