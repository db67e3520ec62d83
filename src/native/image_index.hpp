// Scanners of CNTK's image inputs (spec/image.md §1, §2) and a base64 decoder. Pure C++ (no Python): the bindings
// are in image_index_bindings.cpp, the rules as cntkio applies them in cntkio/formats/image_map.py.
//
// Both scanners read the file with pread in blocks and split it on '\n'. A UTF-8 byte order mark at the start of
// the file is skipped (it counts in byte offsets, not in columns). A blank line (empty, or only spaces, tabs, '\r',
// '\v', '\f') is skipped, but it still counts as a line: line numbers and line-index keys are physical.
//
// Image map (ImageDeserializer):   path \t label      or      key \t path \t label
//   The first line decides the column count; every line must have the same. One trailing '\r' of a line is
//   dropped (it would end the label, which ignores it). The path is split at its first '@' into a zip archive
//   and an item (the text after '@' minus its first byte, '\' made '/'); a leading "..." of the archive or
//   of a plain path becomes `directory`. Paths and archives are interned: ids into distinct texts in first-seen
//   order.
// Base64 file (Base64ImageDeserializer):   label \t base64      or      key \t label \t base64
//   The first line decides whether keys are present (3 fields); every line must have the same field count. The
//   payload is the byte range after the last tab up to '\n' (a trailing '\r' is left to the decoder, which drops
//   trailing bytes that are not base64). Keys are numbers when every key is 1-20 ASCII digits that fit in 64 bits
//   (the value), texts otherwise; without keys, the key of a line is its 0-based physical line index. Two
//   consecutive lines with the same key (CNTK would make them one sequence of two images) are an error.
// Labels (both): only parsed when label_dim >= 0. Optional leading whitespace and '+', 1 or more ASCII digits,
//   optional trailing spaces and '\r' (strtoull's number, the whole field), and below label_dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cntkio::image {

// A problem that stops the scan. `message` holds one "{}" where the caller shows `detail` (bytes of the line,
// quoted as the caller likes) when has_detail. The sequence it concerns: `key` (a key text) when has_key, or
// `key_index` (a 0-based line index used as the key) when it is >= 0. `offset` is the byte offset in the file,
// `line` 1-based, `column` 1-based in characters (a valid UTF-8 character, or one byte of an invalid sequence).
struct Fatal {
  std::string message;
  std::string detail;
  bool has_detail = false;
  std::string key;
  bool has_key = false;
  int64_t key_index = -1;
  int64_t offset = -1;
  int64_t line = 0;
  int64_t column = 0;
  bool failed() const { return !message.empty(); }
  // The line being scanned names no key any more (it was read without a problem).
  void forget_key() {
    key.clear();
    has_key = false;
    key_index = -1;
  }
};

struct MapOptions {
  std::string directory;                  // what a leading "..." becomes
  int64_t label_dim = -1;                 // -1: labels are not parsed (the column must still be there, not empty)
  int64_t block_size = int64_t{4} << 20;  // bytes read per pread (at least 256)
};

// Image map columns, one row per (non-blank) line.
struct MapResult {
  int columns = 0;                          // 2 or 3 (0: the file has no line)
  std::vector<uint8_t> key_blob;            // 3 columns: key i is key_blob[key_offsets[i], key_offsets[i + 1])
  std::vector<int64_t> key_offsets{0};
  std::vector<int64_t> key_index;           // 2 columns: the 0-based physical line index
  std::vector<uint8_t> path_blob;           // distinct plain paths and zip item names (ids in first-seen order)
  std::vector<int64_t> path_offsets{0};
  std::vector<int32_t> path_ids;
  std::vector<uint8_t> container_blob;      // distinct zip archives
  std::vector<int64_t> container_offsets{0};
  std::vector<int32_t> container_ids;       // -1: a plain file
  std::vector<int64_t> labels;              // -1 when labels are not parsed
  std::vector<int32_t> lines;               // 1-based
  std::vector<int64_t> offsets;             // byte offset of each line
};

// Scans bytes [0, size) of the map file open as `fd`. Returns false with `fatal` set on a malformed line (the
// columns then hold the lines before it). Throws std::runtime_error on an I/O error.
bool scan_map(int fd, int64_t size, const MapOptions& options, MapResult& result, Fatal& fatal);

struct Base64Options {
  int64_t label_dim = -1;
  int64_t block_size = int64_t{4} << 20;
};

// Base64 file columns, one row per (non-blank) line = one sequence.
struct Base64Result {
  bool has_keys = false;
  bool numeric_keys = true;             // keys are key_values (numbers, or line indices without keys)
  std::vector<uint8_t> key_blob;        // text keys (when has_keys and not numeric_keys)
  std::vector<int64_t> key_offsets{0};
  std::vector<uint64_t> key_values;     // numeric keys, or the 0-based physical line index without keys
  std::vector<int64_t> labels;          // -1 when labels are not parsed
  std::vector<int64_t> payload_offsets;  // byte range of the base64 field (up to '\n', '\r' included)
  std::vector<int64_t> payload_lengths;
  std::vector<int32_t> lines;           // 1-based
  std::vector<int64_t> offsets;         // byte offset of each line
};

bool scan_base64(int fd, int64_t size, const Base64Options& options, Base64Result& result, Fatal& fatal);

// Base64 (standard alphabet, '=' padding). `base64_trim` is `n` minus the trailing bytes that are neither in the
// alphabet nor '=' (such as '\r'). `base64_decode` decodes `n` bytes (already trimmed) into `out`, which must hold
// n / 4 * 3 bytes, and returns the bytes written, or -1 when the data is invalid: n not a multiple of 4, a byte
// outside the alphabet, or '=' anywhere but as the last one or two bytes.
size_t base64_trim(const uint8_t* data, size_t n);
int64_t base64_decode(const uint8_t* data, size_t n, uint8_t* out);

// Many payloads of a file (the rows of a chunk): payload i is bytes [offsets[i], offsets[i] + lengths[i]),
// trimmed and decoded into blob[out_offsets[i], out_offsets[i + 1]) when ok[i]; an invalid one is empty with
// ok[i] = 0. Ranges in ascending order close to each other are read with one pread. Throws ShortRead (file_io.hpp)
// where the file ends before a range does, std::runtime_error on an I/O error.
struct DecodedBatch {
  std::vector<uint8_t> blob;
  std::vector<int64_t> out_offsets{0};
  std::vector<uint8_t> ok;
};

DecodedBatch decode_batch(int fd, const int64_t* offsets, const int64_t* lengths, size_t n);

}  // namespace cntkio::image
