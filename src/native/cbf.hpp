// CNTK Binary Format (CBF, version 1): the header and chunk table, the per-chunk sequence lengths, chunk
// decoding into flat columns (dense rows; sparse CSC per sequence = CSR rows per sample) and encoding.
// Everything is read with pread and bounds-checked; a malformed file is a CbfError with its byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "buffer.hpp"

namespace cntkio::cbf {

constexpr uint64_t kMagic = 0x636E746B5F62696EULL;  // "nib_ktnc" on disk
constexpr uint32_t kVersion = 1;

struct CbfError : std::runtime_error {
  CbfError(const std::string& what, int64_t offset, int64_t chunk = -1, int64_t sequence = -1, int32_t stream = -1)
      : std::runtime_error(what), offset(offset), chunk(chunk), sequence(sequence), stream(stream) {}
  int64_t offset;    // byte offset of the offending field
  int64_t chunk;     // -1: not in a chunk
  int64_t sequence;  // within the chunk, -1: none
  int32_t stream;    // -1: none
};

struct Stream {
  bool sparse = false;
  bool is_double = false;
  uint32_t dim = 0;
  std::string name;
};

struct Header {
  int64_t header_offset = 0;
  std::vector<Stream> streams;
  std::vector<int64_t> chunk_offsets;  // one per chunk, plus the end of the last chunk (the header offset)
  std::vector<uint32_t> chunk_sequences, chunk_samples;
};

// Reads and checks the header and chunk table of the file open as `fd` (of `size` bytes).
Header read_header(int fd, int64_t size);

// Every sequence's length (the seqLength tables of all chunks), checked against the chunk table.
std::vector<uint32_t> read_lengths(int fd, const Header& header);

struct Column {  // one stream of a decoded chunk
  Buffer<char> values;          // dense: samples x dim values; sparse: nnz values
  Buffer<int32_t> indices;      // sparse: one per value, sorted within each sample
  Buffer<int64_t> indptr;       // sparse: samples + 1
  Buffer<int64_t> seq_offsets;  // sequences + 1 sample offsets
};

// Decodes chunk `chunk`, reading its bytes front to back with pread through a small buffer that stays in
// cache (large payloads go straight into their output arrays): one column per stream.
// `lengths` are the chunk's sequence lengths as read_lengths checked them: the chunk's own table must still say
// the same (a file rewritten in place is an error, never a write beyond the arrays sized from them).
std::vector<Column> decode_chunk(int fd, const Header& header, int64_t chunk, const uint32_t* lengths);

// Appends the blocks of sequences [first, last) of one stream to `out` (CBF chunk layout, section 3).
// Dense: values are samples x dim items of `itemsize` bytes; sparse: CSR arrays (indices sorted per sample).
void encode_stream(std::vector<char>& out, bool sparse, int64_t dim, int64_t itemsize, const char* values,
                   const int32_t* indices, const int64_t* indptr, const int64_t* seq_offsets, int64_t first,
                   int64_t last);

}  // namespace cntkio::cbf
