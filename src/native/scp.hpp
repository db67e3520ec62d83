// SCP (HTK script) file parser: one streaming pass over each file, read with pread in blocks, giving the
// entries of one or more SCP files as columns. Pure C++ (no Python): the bindings are in scp_bindings.cpp.
// The grammar is that of spec/htk-and-mlf.md §1.2 (as cntkio reads it; see cntkio/formats/scp.py):
//
//   logical=physical[start,end]   logical=physical   physical
//
// Lines are split on '\n'; one trailing '\r' is dropped; a UTF-8 byte order mark at the start of a file is
// skipped; empty lines, and lines that start with a space or tab and hold only (Unicode) whitespace, are
// skipped. The logical name ends at the first '='; the range starts at the first '[' after it and must be
// `[start,end]` (1 to 18 digits each) ending the line. The key is the logical name (the physical path when
// there is no '=') up to its last '.'.
// With a prefix, it goes in front of the physical path (and of the logical name when there is no '=');
// without one, the first "..." of the line is replaced by the SCP file's directory (in the logical name or
// the physical path, wherever it is; in both when there is no '=').
//
// Columns (entries in file order, the files one after the other):
//   key_blob / key_offsets     the key of entry i is key_blob[key_offsets[i], key_offsets[i + 1])  (entries + 1)
//   path_blob / path_offsets   distinct physical paths, in first-seen order                     (paths + 1)
//   path_ids                   int32 path of every entry
//   starts / ends              int64 inclusive frame range as written (-1/-1 when unranged; start > end is kept)
//   lines                      int32 1-based line of every entry in its file
//   offsets                    int64 byte offset of every entry's line in its file
//   source_ids                 int32 file of every entry (the order of add_file calls)
// Every entry of a key that occurs more than once is dropped at finish() (the first copy too); the paths keep
// every distinct path seen, also those of dropped entries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cntkio::scp {

// A problem that stops the parse: the message, the byte offset in the file, the 1-based line and column
// (counted in characters: a UTF-8 character, or one byte of an invalid sequence, is one column). When
// `has_detail` is true the message holds one "{}" where the caller shows `detail` (a piece of the line's
// bytes, quoted as the caller likes). `message` is empty when there is none.
struct Fatal {
  std::string message;
  std::string detail;
  bool has_detail = false;
  int64_t offset = -1;
  int64_t line = 0;
  int64_t column = 0;
};

struct Result {
  std::vector<uint8_t> key_blob;
  std::vector<int64_t> key_offsets{0};
  std::vector<uint8_t> path_blob;
  std::vector<int64_t> path_offsets{0};
  std::vector<int32_t> path_ids;
  std::vector<int64_t> starts, ends;
  std::vector<int32_t> lines;
  std::vector<int64_t> offsets;
  std::vector<int32_t> source_ids;
  int64_t duplicate_entries = 0;          // entries dropped for a duplicated key
  int64_t duplicate_keys = 0;             // distinct keys that were duplicated
  std::vector<std::string> first_duplicates;  // the first few of them, in first-seen order
};

struct Options {
  bool has_prefix = false;
  std::string prefix;  // already normalized: '/' separators, one trailing '/'
  int64_t block_size = int64_t{4} << 20;  // bytes read per pread (at least 256)
  size_t duplicates_shown = 5;
};

class Parser {
 public:
  explicit Parser(Options options);
  ~Parser();
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;

  // Appends the entries of bytes [0, size) of the file open as `fd`, whose directory (what "..." becomes)
  // is `directory`. Returns false, with fatal() set, on a malformed entry (the columns then hold the entries
  // before it); throws std::runtime_error on an I/O error. Not to be called again after a failure.
  bool add_file(int fd, int64_t size, std::string_view directory);

  const Fatal& fatal() const;

  // The columns, with every entry of a duplicated key dropped. The parser is empty afterwards.
  Result finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cntkio::scp
