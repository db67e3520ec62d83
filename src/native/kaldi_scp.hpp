// Kaldi scp files ("key rxfilename" lines, e.g. feats.scp) parsed from their bytes into columns: no Python object
// per entry. Pure C++ (no Python): the bindings are in kaldi_bindings.cpp; messages are made by the caller
// (cntkio/_src/formats/kaldi.py) from the lines this parser points at.
//
// Lines are split on '\n' and trimmed of ASCII whitespace (" \t\n\r\v\f", as Python's bytes.split() and Kaldi's
// C-locale parsing); blank lines are skipped. The key is the first word; the rest of the line, trimmed, is the
// target: "path:offset" (the offset of the matrix's "\0B" marker; the key is then checked to precede it) when what
// follows the last ':' is ASCII digits and something precedes it, else "path" (a file holding one matrix, no key).
// A target ending in '|' (a pipe) or ']' (a row/column range), or a line with no target, stops the parse; an
// offset not below 2**63 is a bad entry (no entry, the parse goes on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cntkio::kaldi {

// Why a line is not an entry.
enum ScpProblem : int32_t { kNoTarget = 1, kPipe = 2, kRowRange = 3, kHugeOffset = 4 };

struct ScpEntries {
  std::vector<uint8_t> key_blob;                // key i is key_blob[key_offsets[i], key_offsets[i + 1])
  std::vector<int64_t> key_offsets{0};          // (entries + 1)
  std::vector<uint8_t> path_blob;               // distinct paths, first-seen order, back to back
  std::vector<int64_t> path_offsets{0};         // (paths + 1)
  std::vector<int32_t> path_ids;                // (entries) each entry's path
  std::vector<int64_t> offsets;                 // (entries) the matrix's byte offset (0 without one)
  std::vector<uint8_t> checked_keys;            // (entries) 1: "key " precedes the offset in the archive
  std::vector<int32_t> problems;                // lines that are not entries: ScpProblem, in file order; the
  std::vector<int64_t> problem_lines;           //   1-based line and its first byte; the parse stopped at the
  std::vector<int64_t> problem_offsets;         //   last one unless it is kHugeOffset
};

// The entries of the scp file whose bytes are data[0, size).
ScpEntries parse_scp(const uint8_t* data, size_t size);

}  // namespace cntkio::kaldi
