// CTF byte-level rules shared by the indexer and the parser, and their public entry points.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "number.hpp"

namespace cntkio::ctf {

// Column delimiters: space, tab and every control byte except '\n'. Bytes >= 0x80 are data (UTF-8).
inline bool is_delimiter(unsigned char c) { return c == ' ' || (c < 0x20 && c != '\n'); }
// An input name ends at a space, tab, '|' or control byte.
inline bool is_name_byte(unsigned char c) { return c > 0x20 && c != '|'; }
inline bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

enum class IdMode : int { line = 0, numeric = 1, text = 2 };

// Error kinds reported to Python (keep in sync with cntkio.formats.ctf.ErrorKind).
enum ErrorKind : int32_t {
  kBadNumber = 1,
  kTooManyValues = 2,
  kBadSparseIndex = 3,
  kIndexOutOfRange = 4,
  kMissingColon = 5,
  kBadNamePrefix = 6,
  kUnexpectedByte = 7,
  kDuplicateInput = 8,
  kEmptyRow = 9,
  kValueOutOfRange = 10,
  kMissingInput = 11,
};

struct ErrorRecord {
  int64_t offset;       // absolute byte offset in the file
  int32_t kind;         // ErrorKind
  int32_t stream;       // stream index or -1
  int64_t sequence;     // sequence index (within the call)
  int64_t line = 0;     // 1-based line
  int64_t column = 0;   // 1-based column (bytes)
  int32_t byte = -1;    // the byte at the offset (-1: end of the data)
  int64_t record = -1;  // the bad record (the sequence, which is dropped): its bytes [record, end) in the file
  int64_t end = -1;
};

struct Alias {
  std::string name;
  bool sparse = false;
  uint64_t dim = 0;
};

// Finds the configured stream whose alias is [name, name+len), or -1.
inline int find_alias(const std::vector<Alias>& aliases, const char* name, size_t len) {
  for (size_t i = 0; i < aliases.size(); ++i) {
    const std::string& a = aliases[i].name;
    if (a.size() != len) continue;
    size_t k = 0;  // names are short: a loop, not a call to memcmp
    while (k < len && a[k] == name[k]) ++k;
    if (k == len) return static_cast<int>(i);
  }
  return -1;
}

// Finds which configured stream a name after a '|' is without scanning the name first: a name of at most 8 bytes
// is one masked 64-bit compare and a check that the name ends there.
class NameMatcher {
 public:
  explicit NameMatcher(const std::vector<Alias>& aliases) : aliases_(aliases) {
    for (const Alias& a : aliases) short_names_ &= a.name.size() <= 8 && !a.name.empty();
    if (!short_names_) return;
    for (const Alias& a : aliases) {
      uint64_t word = 0;
      std::memcpy(&word, a.name.data(), a.name.size());
      const size_t bits = 8 * a.name.size();
      words_.push_back(word);
      masks_.push_back(bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1);
      lengths_.push_back(a.name.size());
    }
  }

  // The stream whose name starts at s (and ends before limit), or -1.
  int match(const char* s, const char* limit) const {
    if (short_names_ && limit - s > 8) {
      uint64_t word;
      std::memcpy(&word, s, 8);
      for (size_t i = 0; i < words_.size(); ++i) {
        if ((word & masks_[i]) == words_[i] && !is_name_byte(static_cast<unsigned char>(s[lengths_[i]])))
          return static_cast<int>(i);
      }
      return -1;
    }
    const char* end = s;
    while (end < limit && is_name_byte(static_cast<unsigned char>(*end))) ++end;
    return find_alias(aliases_, s, static_cast<size_t>(end - s));
  }

 private:
  const std::vector<Alias>& aliases_;
  bool short_names_ = true;
  std::vector<uint64_t> words_, masks_;
  std::vector<size_t> lengths_;
};

// Skips the sequence id at the start of a row: digits in line and numeric mode (CNTK drops them in
// every mode), or a whole token up to whitespace or '|' in text mode.
// The buffer must contain a '\n' at or after p (the parser guarantees a final one).
inline const char* skip_row_id(const char* p, IdMode mode) {
  if (mode == IdMode::text) {
    while (!is_space(static_cast<unsigned char>(*p)) && *p != '|') ++p;
  } else {
    while (is_digit(static_cast<unsigned char>(*p))) ++p;
  }
  return p;
}

// Advances to the next '|' or '\n'; the buffer must contain a '\n' at or after p.
inline const char* skip_to_bar_or_newline(const char* p) {
  while (*p != '|' && *p != '\n') ++p;
  return p;
}

struct IndexOptions {
  bool force_line_mode = false;   // skip_sequence_ids: every line is a sequence
  std::vector<Alias> aliases;
  int defining_stream = -1;       // stream with definesMBSize, or -1
  bool count_lines = false;       // compat: index length = physical line count (CNTK)
  bool keep_empty_lines = false;  // compat: blank/comment-only lines are sequences in line mode
  bool require_all_inputs = true;
  int64_t chunk_size = 32 << 20;  // target chunk size in bytes
  int64_t block_size = 8 << 20;   // bytes read at a time
  int threads = 1;                // a large file is indexed in up to `threads` parts at once (same result)
  int64_t parallel_min_bytes = int64_t{64} << 20;  // the smallest file split in two (a part per half of it)
};

struct IndexResult {
  IdMode mode = IdMode::numeric;
  int64_t begin = 0;                       // first data byte (past a BOM and leading whitespace)
  std::vector<int64_t> offsets, ends;      // byte range of each kept sequence
  std::vector<int32_t> lengths;            // samples (index length) of each kept sequence
  std::vector<uint64_t> keys;              // numeric keys (line number in line mode)
  std::vector<char> key_blob;              // text mode: the ids, back to back
  std::vector<int64_t> key_offsets{0};     // text mode: id i is key_blob[key_offsets[i], key_offsets[i+1])
  std::vector<int64_t> chunk_starts;       // first sequence of each chunk, then the sequence count
  std::vector<int64_t> chunk_first_lines;  // 0-based line of each chunk's first sequence
  std::vector<ErrorRecord> errors;         // counted errors; the sequences they name were dropped
  std::vector<std::string> error_keys;     // key text of each error's sequence
  int64_t dropped_lines = 0;               // lines without the defining stream, or empty (line mode)
  int64_t dropped_sequences = 0;           // id-mode sequences without the defining stream
  int64_t total_lines = 0;
  int64_t repeated_keys = 0;               // sequences whose id an earlier sequence already used
  std::string fatal;                       // non-empty: fatal error message
  int64_t fatal_offset = -1, fatal_line = 0, fatal_column = 0;
};

// Indexes the file open as `fd` (of `size` bytes), reading it block by block with pread.
IndexResult index_file(int fd, int64_t size, const IndexOptions& options);

struct ParseOptions {
  IdMode mode = IdMode::numeric;
  std::vector<Alias> aliases;
  bool sort_sparse = true;  // sort indices and sum duplicates (CNTK keeps file order)
};

template <class T>
struct StreamBuffers {  // (Buffer: mappings of their own when large, given back when freed; not zero-filled)
  Buffer<T> values;
  Buffer<int32_t> indices;       // sparse only
  Buffer<int64_t> indptr{0};     // sparse only: per-sample entry offsets
  Buffer<int64_t> seq_offsets{0};  // per-sequence sample offsets
  int64_t samples = 0;
};

struct ParseStats {
  int64_t padded_samples = 0, first_padded_offset = -1, first_padded_line = 0, first_padded_column = 0;
  int64_t unknown_inputs = 0, first_unknown_offset = -1, first_unknown_line = 0, first_unknown_column = 0;
};

template <class T>
struct ParseResult {
  std::vector<StreamBuffers<T>> streams;
  std::vector<ErrorRecord> errors;
  ParseStats stats;
};

// How much room to reserve in the output buffers before parsing (untouched reserved pages cost no memory): for
// `samples` samples per stream (at most; -1: count the rows), `bytes` bytes of text and `sequences` sequences. A
// run reserves for the whole chunk when the others are joined onto it.
struct Reservation {
  int64_t samples = -1;
  int64_t bytes = 0;
  int64_t sequences = 0;
};

// Parses the sequences [starts[i], ends[i]) of data[0, size) (offsets relative to data, whose
// first byte is at absolute file offset `base`, on 0-based line `first_line`). Sequences start at line
// starts. Errors get their line and column in one pass over the buffer. `room` (default: for these sequences,
// rows counted) is a hint: buffers grow past it when needed.
template <class T>
ParseResult<T> parse_sequences(const char* data, int64_t size, int64_t base, int64_t first_line,
                               const int64_t* starts, const int64_t* ends, int64_t n, const ParseOptions& options,
                               const Reservation* room = nullptr);

// Reads bytes [start, start + size) of the file open as `fd` and parses the sequences [starts[i], ends[i]) of them
// (relative to `start`, whose line is `first_line`; `lengths`, the index's sample counts of the sequences, or
// null, bound the buffers to reserve), split into up to `parts` runs of about equal bytes, each read
// and parsed on a thread of its own, then joined: the same result (arrays, errors with their sequence numbers, lines
// and columns, stats) as one run. Fewer parts when there are few sequences or fewer than `min_part_bytes` bytes per part. Throws ShortRead when the
// file ends early.
template <class T>
ParseResult<T> parse_file_range(int fd, int64_t start, int64_t size, int64_t first_line, const int64_t* starts,
                                const int64_t* ends, const int64_t* lengths, int64_t n, const ParseOptions& options,
                                int parts, int64_t min_part_bytes = int64_t{1} << 20);

}  // namespace cntkio::ctf
