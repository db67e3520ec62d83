// Framing of binary record files for RecordDeserializer: the walk over length-prefixed records (a
// little-endian uint64 length, then the data) and TFRecord files (uint64 length, uint32 masked CRC-32C of
// the length, the data, uint32 masked CRC-32C of the data), and the CRC-32C of TFRecord data.
// Pure C++ (no Python): the bindings are in records_bindings.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace cntkio::records {

enum class Framing : int { LengthPrefixed = 0, TFRecord = 1 };

// Bytes before a record's data (the length, and in a TFRecord the length's CRC) and after it.
inline int64_t header_bytes(Framing f) { return f == Framing::TFRecord ? 12 : 8; }
inline int64_t trailer_bytes(Framing f) { return f == Framing::TFRecord ? 4 : 0; }

struct WalkResult {
  std::vector<int64_t> starts;  // byte offset of every complete record's header, in file order
  std::string error;            // empty, or why the walk stopped (a truncated record, a bad length CRC)
  int64_t error_offset = -1;    // byte offset of the header of the record the error is about
};

// Reads up to `size` bytes at `offset` into `out`; returns how many were read (fewer only at the end).
using ReadFn = std::function<int64_t(int64_t offset, int64_t size, char* out)>;

// Walks the records of bytes [begin, end) of a file read through `read`, in blocks of `block` bytes: every
// header is read once, and the data of a record longer than a block is skipped, not read. A record that
// does not fit before `end` (or a header cut short) stops the walk with an error naming its offset; so does
// a TFRecord length whose CRC does not match (the length cannot be trusted, so nothing after it can be
// framed). Data CRCs are not checked here (see bad_data_crcs). Throws std::runtime_error from `read`.
WalkResult walk(const ReadFn& read, int64_t begin, int64_t end, Framing framing, int64_t block = int64_t{1} << 20);

// The walk over the file open as `fd`, read with pread.
WalkResult walk_file(int fd, int64_t begin, int64_t end, Framing framing, int64_t block = int64_t{1} << 20);

// CRC-32C (Castagnoli) of `n` bytes, continuing from `crc` (0 to start); SSE4.2 where the CPU has it.
uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc = 0);

// The same CRC computed with tables only (to check the SSE4.2 path against).
uint32_t crc32c_portable(const uint8_t* data, size_t n, uint32_t crc = 0);

// TFRecord's (LevelDB's) masking of a stored CRC.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// Positions i (ascending) of the TFRecords whose stored data CRC does not match their data, among the
// records whose headers are at `starts[i]` in `buffer` (offsets into the buffer). Each record's length is
// read from its header; throws std::invalid_argument when a record does not lie inside the buffer.
std::vector<int64_t> bad_data_crcs(const uint8_t* buffer, int64_t size, const int64_t* starts, int64_t n);

inline uint64_t load_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

inline uint32_t load_u32le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace cntkio::records
