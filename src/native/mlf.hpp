// MLF (HTK master label file) parser: one streaming pass over a file read with pread in blocks, giving the
// labels of every entry as runs of states (never one value per frame). Pure C++ (no Python): the bindings
// are in mlf_bindings.cpp. The grammar is that of spec/htk-and-mlf.md §2.1.
//
// Columns (entries = valid entries, in file order; invalid entries are left out and listed: ranges not
// contiguous or not starting at frame 0, no label lines, zero frames, a bad header, an entry not ended by
// '.' or cut by the end of the file):
//   key_blob / key_offsets   the key of entry i is key_blob[key_offsets[i], key_offsets[i + 1])  (entries + 1)
//   run_offsets              the runs of entry i are [run_offsets[i], run_offsets[i + 1])        (entries + 1)
//   run_states               uint16 state id of every run                                       (runs)
//   run_counts               uint32 frame count of every run, >= 1                              (runs)
//   lengths                  int64 frames of every entry (the end of its last label line)       (entries)
// A run's first frame is implied: runs of a valid entry are contiguous and start at frame 0, so the first
// frame of run r is the sum of the counts before it in its entry. Every label line of at least one frame is
// a run of its own (consecutive lines of the same state are never merged: each line's first frame is a
// phone boundary); label lines of zero frames add no run.
// Memory: 6 bytes per run; 24 bytes per entry plus the key's bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cntkio::mlf {

// An entry left out of the columns: its key (the header text when it has none, "" for a stray '.'), the
// 1-based line the problem is on and that line's byte offset, and why.
struct InvalidEntry {
  std::string key;
  int64_t line = 0;
  int64_t offset = 0;
  std::string reason;
  int64_t column = 0;  // 1-based column of the problem within its line, 0 when the whole line is meant
};

// A problem that stops the parse: message, byte offset, 1-based line and column, and the key of the entry
// it is in ("" outside an entry). `message` is empty when there is none.
struct Fatal {
  std::string message;
  int64_t offset = -1;
  int64_t line = 0;
  int64_t column = 0;
  std::string key;
};

struct ParseResult {
  std::string key_blob;
  std::vector<int64_t> key_offsets{0};
  std::vector<int64_t> run_offsets{0};
  std::vector<uint16_t> run_states;
  std::vector<uint32_t> run_counts;
  std::vector<int64_t> lengths;
  std::vector<InvalidEntry> invalid;
  Fatal fatal;
  int64_t lines = 0;  // lines read
};

struct Options {
  // State names (the id is the position); when `has_states` is false, label lines are
  // `start end name class_id` with an integer class id.
  bool has_states = false;
  std::vector<std::string> states;
  int64_t dim = 0;                      // the label dimension: every id must be below it; at most 65535
  int64_t block_size = int64_t{4} << 20;  // bytes read per pread
};

// Parses bytes [0, size) of the file open as `fd`. Never throws for bad input (the result's `fatal` says
// what stopped the parse, also for bad options: a dimension outside [1, 65535], an empty state list or a
// duplicate state name; the columns then hold the entries before it); throws std::runtime_error on an I/O
// error.
ParseResult parse_file(int fd, int64_t size, const Options& options);

}  // namespace cntkio::mlf
