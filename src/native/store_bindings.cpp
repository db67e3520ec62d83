// Python bindings of minibatch assembly (assemble.hpp) and chunk memory, registered into cntkio._native by
// module.cpp: ChunkStore holds the loaded chunks of a reader's deserializers and gathers minibatches from them (GIL
// released); reusable_buffer hands out blocks of the buffer pool (buffer_pool.hpp); release_free_memory trims the heap.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "assemble.hpp"
#include "bindings.hpp"
#include "buffer_pool.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::bindings;

namespace {

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

struct StreamLayout {
  assemble::ColumnSpec spec;
  nb::dlpack::dtype dtype;
};

// Keeps Python objects alive from C++ (released with the GIL held).
std::shared_ptr<void> keep_alive(std::vector<nb::object> objects) {
  auto* held = new std::vector<nb::object>(std::move(objects));
  return std::shared_ptr<void>(held, [](void* p) {
    nb::gil_scoped_acquire acquire;
    delete static_cast<std::vector<nb::object>*>(p);
  });
}

// ChunkStore.gather's result (cntkio._native.GatherResult), read-only: exactly one of three outcomes. `missing` set:
// slots to load first, nothing gathered; `short` set: a unit asks for more rows than its stream has; else `streams`
// (and `keep`) hold the minibatch.
struct GatherResult {
  nb::object streams;  // None, or per stream of every deserializer (values, lengths, indices or None, indptr or None)
  nb::object keep;     // None (every unit kept), or uint8 per unit: 0 for a unit dropped as invalid
  nb::object short_;   // None, or (unit, stream, row) of the unit whose stream is shorter than it asks for
  nb::object missing;  // None, or [(deserializer, slot)] not loaded
};

// The loaded chunks of every deserializer of a reader (assemble::Store) and the layouts of their streams.
class ChunkStore {
 public:
  ChunkStore(const std::vector<std::vector<std::tuple<bool, int64_t, char, int64_t>>>& layouts,
             const std::vector<int64_t>& slot_counts) {
    nb::module_ numpy = nb::module_::import_("numpy");
    frombuffer_ = numpy.attr("frombuffer");
    numpy_dtype_ = numpy.attr("dtype");
    int32_ = numpy_dtype_("int32");
    int64_ = numpy_dtype_("int64");
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
        // The NumPy dtype the gather's values are read as from its arena: dense rows as a sub-array dtype, so that
        // numpy.frombuffer gives (samples, width) at once.
        const std::string code = kind == 'b' ? std::string("?") : std::string(1, kind) + std::to_string(itemsize);
        nb::object base = numpy_dtype_(nb::str(code.c_str()));
        value_dtypes_.push_back(sparse ? base : numpy_dtype_(nb::make_tuple(base, nb::make_tuple(width))));
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
    if (nb::isinstance<IndexArray>(match)) {
      IndexArray m = exact_array<IndexArray>(match, "match");
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

  GatherResult gather(IndexArray chunk, OffsetArray unit, std::optional<OffsetArray> offset,
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
      return {nb::none(), nb::none(), nb::none(), std::move(missing)};
    }
    if (r.short_unit >= 0) {
      return {nb::none(), nb::none(), nb::make_tuple(r.short_unit, r.short_stream, r.short_row), nb::none()};
    }
    // One array owns the arena (returned to the allocator when the last view of it goes); each stream's arrays
    // are numpy.frombuffer views of it, a NumPy call each instead of an exported array and a capsule each.
    const size_t arena_bytes = r.arena.size();
    auto* arena = new Buffer<char>(std::move(r.arena));
    nb::capsule owner(arena, [](void* p) noexcept { delete static_cast<Buffer<char>*>(p); });
    const size_t arena_shape[1] = {arena_bytes};
    static char empty_arena[assemble::kArenaAlign];
    nb::object buffer = nb::cast(nb::ndarray<nb::numpy, uint8_t>(arena_bytes ? arena->data() : empty_arena, 1,
                                                                 arena_shape, owner));
    auto view = [&](const nb::object& dtype, size_t count, size_t offset) {
      PyObject* args[4] = {buffer.ptr(), dtype.ptr(), PyLong_FromSize_t(count), PyLong_FromSize_t(offset)};
      if (!args[2] || !args[3]) {
        Py_XDECREF(args[2]);
        Py_XDECREF(args[3]);
        throw nb::python_error();
      }
      PyObject* array = PyObject_Vectorcall(frombuffer_.ptr(), args, 4, nullptr);
      Py_DECREF(args[2]);
      Py_DECREF(args[3]);
      if (!array) throw nb::python_error();
      return nb::steal(array);
    };
    nb::list streams;
    for (size_t s = 0; s < layout_.size(); ++s) {
      const assemble::StreamOut& out = r.streams[s];
      const StreamLayout& layout = layout_[s];
      const size_t itemsize = static_cast<size_t>(layout.spec.itemsize);
      nb::object lengths = view(int64_, out.lengths.size(), out.lengths_at);
      if (layout.spec.sparse) {
        streams.append(nb::make_tuple(view(value_dtypes_[s], out.values.size() / itemsize, out.values_at), lengths,
                                      view(int32_, out.indices.size(), out.indices_at),
                                      view(int64_, out.indptr.size(), out.indptr_at)));
      } else {
        const size_t row_bytes = itemsize * static_cast<size_t>(layout.spec.width);
        streams.append(nb::make_tuple(view(value_dtypes_[s], out.values.size() / row_bytes, out.values_at), lengths,
                                      nb::none(), nb::none()));
      }
    }
    nb::object keep = r.keep.empty() ? nb::none() : nb::cast(to_numpy(std::move(r.keep)));
    return {std::move(streams), std::move(keep), nb::none(), nb::none()};
  }

 private:
  size_t stream_offset(size_t d) const {
    size_t offset = 0;
    for (size_t k = 0; k < d; ++k) offset += store_->layout(k).size();
    return offset;
  }

  std::vector<StreamLayout> layout_;  // every stream, deserializer after deserializer
  std::unique_ptr<assemble::Store> store_;
  nb::object frombuffer_, numpy_dtype_, int32_, int64_;  // numpy.frombuffer, numpy.dtype, the offsets' dtypes
  std::vector<nb::object> value_dtypes_;  // per stream, the dtype of its values in the arena (see the constructor)
};

}  // namespace

void bind_store(nb::module_& m) {
  nb::class_<GatherResult>(m, "GatherResult",
                           "A gathered minibatch (ChunkStore.gather), read-only: `missing` slots to load first, or "
                           "a `short` unit, or the `streams` (and `keep`).")
      .def_ro("streams", &GatherResult::streams,
              "None, or per stream of every deserializer in order: (values, lengths, indices, indptr) when sparse, "
              "(values (samples, width), lengths, None, None) when dense; lengths int64 (samples per kept unit)")
      .def_ro("keep", &GatherResult::keep, "None (every unit kept), or uint8 per unit: 0 for a unit dropped as invalid")
      .def_ro("short", &GatherResult::short_,
              "None, or (unit, stream, row): the unit's stream (of every stream, in order) is shorter than it asks for")
      .def_ro("missing", &GatherResult::missing, "None, or [(deserializer, slot)] not loaded (nothing gathered)");
  m.def("reusable_buffer", &reusable_buffer, "bytes"_a,
        "Uninitialised bytes (uint8 array) from a pool of buffers that chunks give back when they are freed.");
  m.def("release_free_memory", &release_free_memory,
        "Returns the heap's free pages to the system (glibc malloc_trim; no-op elsewhere), GIL released.");
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
           "version"_a.none() = nb::none(),
           "Gathers units (kind 0 sequences, 1 frames, 2 pieces [offset, offset + count)) of the loaded chunks into "
           "one minibatch (GIL released): a GatherResult.");
}
