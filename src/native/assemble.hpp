// Minibatch assembly: parsed chunks as typed columns, and one gather per minibatch that copies the
// selected sequences, frames or pieces of sequences into fresh flat buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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
};

struct Chunk {
  std::vector<Column> columns;
  int64_t sequences = 0;
  std::vector<uint8_t> bad;    // per sequence: a counted error dropped some of its samples (or empty);
                               // frame mode and BPTT skip such a sequence
  std::shared_ptr<void> owner;  // keeps the buffers alive
};

// What every chunk of a reader holds per stream (checked when a chunk is loaded).
struct ColumnSpec {
  bool sparse = false;
  int64_t width = 0;
  int64_t itemsize = 0;
};

// A chunk as a table chunk of the reader: the rows [row0, ...) of a deserializer chunk; in frame mode
// `frame_starts` (exclusive cumulative index lengths of those rows) maps frames to rows.
struct Slot {
  std::shared_ptr<const Chunk> chunk;
  int64_t row0 = 0;
  int64_t first_unit = 0;  // reader-wide number of the slot's first unit
  std::vector<int64_t> frame_starts;
};

// Checks a chunk's columns against the layout, each other and the chunk's sequence count; throws
// std::invalid_argument naming the stream and the problem.
void validate(const Chunk& chunk, const std::vector<ColumnSpec>& layout);

enum class UnitKind : int { sequences = 0, frames = 1, pieces = 2 };

struct Request {
  const int32_t* chunk = nullptr;  // slot (index into the slots given to gather) of each unit
  const int64_t* unit = nullptr;   // reader-wide unit number (a sequence, or a frame in frame mode)
  const int64_t* offset = nullptr;  // pieces: first sample
  const int64_t* count = nullptr;   // pieces: number of samples
  int64_t n = 0;
  UnitKind kind = UnitKind::sequences;
};

struct StreamOut {
  std::vector<char> values;
  std::vector<int32_t> indices;
  std::vector<int64_t> indptr;
  std::vector<int64_t> lengths;  // samples per kept unit
};

struct GatherResult {
  std::vector<StreamOut> streams;
  std::vector<uint8_t> keep;  // empty: every unit kept; else 0 for units dropped as invalid
  int64_t short_unit = -1;    // >= 0: a unit whose stream `short_stream` is too short (no counted error)
  int32_t short_stream = -1;
  int64_t short_row = -1;
};

// Gathers the units of a request from the slots (every referenced slot must be loaded); throws
// std::invalid_argument for a unit outside its chunk.
GatherResult gather(const std::vector<const Slot*>& slots, const Request& request,
                    const std::vector<ColumnSpec>& layout);

}  // namespace cntkio::assemble
