// Minibatch assembly: parsed chunks as typed columns, held per deserializer in a Store, and one gather
// per minibatch that copies the selected sequences, frames or pieces of sequences of every deserializer
// into fresh flat buffers. The first deserializer (the primary) drives the order; the others (secondaries)
// are joined to it by key: per corpus sequence, the secondary's sequence holding the same key.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "buffer.hpp"

namespace cntkio::assemble {

// One stream of a parsed chunk: dense rows of `width` values, or CSR rows of dimension `width`.
struct Column {
  bool sparse = false;
  int64_t width = 0;     // dense: values per sample; sparse: the dimension
  int64_t itemsize = 0;  // bytes per value
  const char* values = nullptr;
  const int32_t* indices = nullptr;      // sparse: one per value
  const int64_t* indptr = nullptr;       // sparse: samples + 1
  const int64_t* seq_offsets = nullptr;  // sequences + 1 sample offsets
  int64_t samples = 0;
  int64_t nnz = 0;  // sparse: number of values
  int64_t per_sample = -1;  // sparse: k when every sample has exactly k values (one-hot labels: 1), else -1;
                            // the gather then finds a sample's values without reading indptr
};

// k when indptr[i] == i * k for every sample i (see Column::per_sample), else -1.
int64_t uniform_entries(const int64_t* indptr, int64_t samples);

struct Chunk {
  std::vector<Column> columns;
  int64_t sequences = 0;
  std::vector<uint8_t> bad;    // per sequence (or empty): 1 = a counted error dropped some of its samples
                               // (frame mode and BPTT skip it), 2 = it has no usable data (always skipped)
  std::shared_ptr<void> owner;  // keeps the buffers alive
};

// What every chunk of a deserializer holds per stream (checked when a chunk is loaded).
struct ColumnSpec {
  bool sparse = false;
  int64_t width = 0;
  int64_t itemsize = 0;
};

// A loaded chunk. For the primary it is a table chunk of the reader: its sequences are rows
// `rows` (or, when `rows` is empty, row0, row0 + 1, ...) of a deserializer chunk, numbered from
// `first_sequence` in the corpus; in frame mode `frame_starts` (exclusive cumulative lengths of those
// sequences) maps frames to sequences. A secondary's slot is one of its deserializer chunks, whole.
struct Slot {
  std::shared_ptr<const Chunk> chunk;
  int64_t row0 = 0;
  std::vector<int64_t> rows;
  int64_t first_unit = 0;      // reader-wide number of the slot's first unit
  int64_t first_sequence = 0;  // corpus number of the slot's first sequence
  std::vector<int64_t> frame_starts;
};

// Checks a chunk's columns against the layout, each other and the chunk's sequence count; throws
// std::invalid_argument naming the stream and the problem.
void validate(const Chunk& chunk, const std::vector<ColumnSpec>& layout);

enum class UnitKind : int { sequences = 0, frames = 1, pieces = 2 };

struct Request {
  const int32_t* chunk = nullptr;   // primary slot of each unit
  const int64_t* unit = nullptr;    // reader-wide unit number (a sequence, or a frame in frame mode)
  const int64_t* offset = nullptr;  // pieces: first sample
  const int64_t* count = nullptr;   // pieces: number of samples
  const uint8_t* version = nullptr; // per unit, the version of the secondaries' chunks to read (see set_versions)
  int64_t n = 0;
  UnitKind kind = UnitKind::sequences;
};

// `size()` elements at `data()`: a part of a gather's arena.
template <class T>
struct Span {
  T* ptr = nullptr;
  size_t n = 0;
  T* data() const { return ptr; }
  size_t size() const { return n; }
  bool empty() const { return n == 0; }
  T* begin() const { return ptr; }
  T* end() const { return ptr + n; }
  T& operator[](size_t i) const { return ptr[i]; }
  T& back() const { return ptr[n - 1]; }
};

struct StreamOut {  // parts of the gather's arena, written once by the gather: not zero-filled first
  Span<char> values;
  Span<int32_t> indices;  // sparse only
  Span<int64_t> indptr;   // sparse only
  Span<int64_t> lengths;  // samples per kept unit
  // Byte offsets of the parts in the arena (each a multiple of kArenaAlign).
  size_t values_at = 0, indices_at = 0, indptr_at = 0, lengths_at = 0;
};

constexpr size_t kArenaAlign = 64;  // every part of a gather's arena starts on a cache line of its own

struct GatherResult {
  // The minibatch's arrays, every stream's, in one allocation (the arrays handed to Python are views of it).
  Buffer<char> arena;
  std::vector<StreamOut> streams;  // every deserializer's streams, deserializer after deserializer
  std::vector<uint8_t> keep;       // empty: every unit kept; else 0 for units dropped as invalid
  int64_t short_unit = -1;         // >= 0: a unit whose stream `short_stream` (of every stream, in order)
  int32_t short_stream = -1;       //   is shorter than the unit asks for (no counted error explains it)
  int64_t short_row = -1;          //   row of the unit's sequence in its chunk
  std::vector<std::pair<int32_t, int64_t>> missing;  // (deserializer, slot) not loaded: nothing gathered
};

// The per-corpus-sequence link of a secondary deserializer: `match[s]` is its sequence (numbered chunk
// after chunk, `chunk_starts` = first sequence of each chunk) holding the key of corpus sequence s.
struct Lookup {
  const int32_t* match32 = nullptr;  // one of the two is set
  const int64_t* match64 = nullptr;
  int64_t sequences = 0;  // corpus sequences covered
  const int64_t* chunk_starts = nullptr;
  int64_t chunks = 0;
  std::shared_ptr<void> owner;
};

// The loaded chunks of every deserializer of a reader. Loads, clears and gathers may run on different
// threads: the slot tables are guarded by a mutex, and a gather holds the slots it reads.
class Store {
 public:
  Store(std::vector<std::vector<ColumnSpec>> layouts, std::vector<int64_t> slot_counts);

  // Validates `chunk` (std::invalid_argument) and puts it in slot `index` of deserializer `d`.
  void load(size_t d, int64_t index, std::shared_ptr<Slot> slot);
  void clear(size_t d, int64_t index);
  // Secondary d's link to the corpus (d >= 1).
  void set_lookup(size_t d, Lookup lookup);
  // Secondary d holds one sample per sequence, repeated to the length of the primary's sequence (CNTK's
  // expandToUtterance: an utterance's i-vector beside its frames); in frame mode every frame gets it.
  void set_broadcast(size_t d);
  // Deserializer d keeps `versions` copies of each chunk (chunks that differ from sweep to sweep: version =
  // sweep % versions); its slots are chunk * versions + version. For a secondary the gather picks the version of
  // each unit from Request::version; the primary's slots come in the request already.
  void set_versions(size_t d, int64_t versions);
  // Per corpus sequence, the most samples a whole sequence takes from any stream (truncation); none if null.
  void set_caps(const int64_t* caps, int64_t sequences, std::shared_ptr<void> owner);

  GatherResult gather(const Request& request) const;

  size_t deserializers() const { return layouts_.size(); }
  const std::vector<ColumnSpec>& layout(size_t d) const { return layouts_[d]; }
  int64_t slot_count(size_t d) const { return static_cast<int64_t>(slots_[d].size()); }

 private:
  std::vector<std::vector<ColumnSpec>> layouts_;
  std::vector<std::vector<std::shared_ptr<const Slot>>> slots_;
  std::vector<Lookup> lookups_;
  std::vector<uint8_t> broadcast_;  // per deserializer
  std::vector<int64_t> versions_;   // per deserializer
  // Per deserializer and slot, the number of the last gather that used the slot: finds the distinct slots
  // of a minibatch in one pass (guarded by the mutex).
  mutable std::vector<std::vector<uint64_t>> seen_;
  mutable uint64_t gathers_ = 0;
  const int64_t* caps_ = nullptr;
  int64_t caps_size_ = 0;
  std::shared_ptr<void> caps_owner_;
  mutable std::mutex mutex_;
};

}  // namespace cntkio::assemble
