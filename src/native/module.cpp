// Python bindings of the native CTF indexer and parser (module cntkio._native).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <tuple>

#include "ctf.hpp"
#include "randomizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio::ctf;

namespace {

using ByteArray = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OffsetArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using AliasSpec = std::tuple<std::string, bool, uint64_t>;

// Moves a vector into a NumPy array that owns it (no copy).
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& values, std::vector<size_t> shape = {}) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  if (shape.empty()) shape = {owned->size()};
  return nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner);
}

std::vector<Alias> to_aliases(const std::vector<AliasSpec>& specs) {
  std::vector<Alias> aliases;
  for (const auto& [name, sparse, dim] : specs) aliases.push_back({name, sparse, dim});
  return aliases;
}

nb::dict errors_to_dict(std::vector<ErrorRecord>&& errors) {
  std::vector<int64_t> offsets, sequences;
  std::vector<int32_t> kinds, streams;
  for (const ErrorRecord& e : errors) {
    offsets.push_back(e.offset);
    kinds.push_back(e.kind);
    streams.push_back(e.stream);
    sequences.push_back(e.sequence);
  }
  nb::dict d;
  d["offset"] = to_numpy(std::move(offsets));
  d["kind"] = to_numpy(std::move(kinds));
  d["stream"] = to_numpy(std::move(streams));
  d["sequence"] = to_numpy(std::move(sequences));
  return d;
}

nb::dict index_buffer(ByteArray data, int64_t begin, int64_t first_line, int mode,
               const std::vector<AliasSpec>& aliases, int defining_stream, bool count_lines,
               bool keep_empty_lines, bool require_all_inputs, bool release_mapped_pages) {
  IndexOptions options;
  options.mode = static_cast<IdMode>(mode);
  options.aliases = to_aliases(aliases);
  options.defining_stream = defining_stream;
  options.count_lines = count_lines;
  options.keep_empty_lines = keep_empty_lines;
  options.require_all_inputs = require_all_inputs;
  options.release_mapped_pages = release_mapped_pages;
  IndexResult r;
  {
    nb::gil_scoped_release release;
    r = build_index(reinterpret_cast<const char*>(data.data()), begin,
                    static_cast<int64_t>(data.shape(0)), first_line, options);
  }
  nb::dict d;
  d["offsets"] = to_numpy(std::move(r.offsets));
  d["ends"] = to_numpy(std::move(r.ends));
  d["lengths"] = to_numpy(std::move(r.lengths));
  d["first_lines"] = to_numpy(std::move(r.first_lines));
  d["keys"] = to_numpy(std::move(r.keys));
  d["key_lengths"] = to_numpy(std::move(r.key_lengths));
  d["valid"] = to_numpy(std::move(r.valid));
  d["errors"] = errors_to_dict(std::move(r.errors));
  d["dropped_lines"] = r.dropped_lines;
  d["dropped_sequences"] = r.dropped_sequences;
  d["total_lines"] = r.total_lines;
  d["fatal"] = r.fatal;
  d["fatal_offset"] = r.fatal_offset;
  return d;
}

template <class T>
nb::tuple parse_typed(const char* data, int64_t size, int64_t base, const int64_t* starts, const int64_t* ends, int64_t n,
                      const ParseOptions& options) {
  ParseResult<T> r;
  {
    nb::gil_scoped_release release;
    r = parse_sequences<T>(data, size, base, starts, ends, n, options);
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
      streams.append(nb::make_tuple(to_numpy(std::move(b.values), {samples, static_cast<size_t>(alias.dim)}),
                                    to_numpy(std::move(b.seq_offsets))));
    }
  }
  nb::dict stats;
  stats["padded_samples"] = r.stats.padded_samples;
  stats["first_padded_offset"] = r.stats.first_padded_offset;
  stats["unknown_inputs"] = r.stats.unknown_inputs;
  stats["first_unknown_offset"] = r.stats.first_unknown_offset;
  return nb::make_tuple(streams, errors_to_dict(std::move(r.errors)), stats);
}

nb::tuple parse_buffer(ByteArray data, int64_t base, OffsetArray starts, OffsetArray ends, int mode,
                const std::vector<AliasSpec>& aliases, bool double_precision, bool sort_sparse) {
  if (starts.shape(0) != ends.shape(0)) throw nb::value_error("starts and ends differ in length");
  const int64_t n = static_cast<int64_t>(starts.shape(0));
  const int64_t size = static_cast<int64_t>(data.shape(0));
  for (int64_t i = 0; i < n; ++i) {
    if (starts.data()[i] < 0 || starts.data()[i] > ends.data()[i] || ends.data()[i] > size)
      throw nb::value_error("sequence byte range outside the buffer");
  }
  ParseOptions options;
  options.mode = static_cast<IdMode>(mode);
  options.aliases = to_aliases(aliases);
  options.sort_sparse = sort_sparse;
  const char* bytes = reinterpret_cast<const char*>(data.data());
  if (double_precision) return parse_typed<double>(bytes, size, base, starts.data(), ends.data(), n, options);
  return parse_typed<float>(bytes, size, base, starts.data(), ends.data(), n, options);
}

nb::ndarray<nb::numpy, int64_t> chunk(OffsetArray offsets, OffsetArray ends, int64_t limit) {
  std::vector<int64_t> starts;
  {
    nb::gil_scoped_release release;
    starts = chunk_starts(offsets.data(), ends.data(), static_cast<int64_t>(offsets.shape(0)), limit);
  }
  return to_numpy(std::move(starts));
}

nb::tuple compat_order(const std::vector<int64_t>& units_per_chunk, const std::vector<int64_t>& samples_per_chunk,
                       int64_t window, bool sample_window, uint64_t seed) {
  cntkio::randomizer::CompatOrder r;
  {
    nb::gil_scoped_release release;
    r = cntkio::randomizer::compat_block_order(units_per_chunk, samples_per_chunk, window, sample_window, seed);
  }
  return nb::make_tuple(to_numpy(std::move(r.units)), to_numpy(std::move(r.chunk_order)),
                        to_numpy(std::move(r.window_begin)), to_numpy(std::move(r.window_end)));
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "Native CTF indexer and parser of cntkio.";
  m.def("ctf_index", &index_buffer, "data"_a, "begin"_a, "first_line"_a, "mode"_a, "aliases"_a,
        "defining_stream"_a, "count_lines"_a, "keep_empty_lines"_a, "require_all_inputs"_a,
        "release_mapped_pages"_a = false,
        "Index the sequences of a CTF buffer (GIL released).");
  m.def("ctf_parse", &parse_buffer, "data"_a, "base"_a, "starts"_a, "ends"_a, "mode"_a, "aliases"_a,
        "double_precision"_a, "sort_sparse"_a,
        "Parse CTF sequences into flat NumPy buffers (GIL released).");
  m.def("ctf_chunk_starts", &chunk, "offsets"_a, "ends"_a, "limit"_a,
        "First sequence of each chunk under a byte budget.");
  m.def("compat_block_order", &compat_order, "units_per_chunk"_a, "samples_per_chunk"_a, "window"_a,
        "sample_window"_a, "seed"_a,
        "CNTK's BlockRandomizer order of one sweep (MT19937-64): (units, chunk_order, window_begin, window_end).");
}
