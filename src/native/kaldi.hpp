// Kaldi binary matrices: the header of one matrix ("\0B" marker, type token FM / DM / CM / CM2 / CM3, dimensions)
// parsed from bytes, and the matrices of a chunk of utterances read with pread and decoded (float32 as stored,
// float64 converted, compressed matrices decompressed with kaldiio's float32 arithmetic), then expanded by a
// context window; archives read directly are scanned for their matrices. Scp files are parsed by kaldi_scp.hpp.
// Kaldi writes binary matrices little-endian; so does every host cntkio builds on (checked below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cntkio::kaldi {

enum Kind : int32_t { kFloat = 0, kDouble = 1, kColumnPercentiles = 2, kTwoByte = 3, kOneByte = 4 };

constexpr size_t kMaxHeaderBytes = 22;  // "\0B" + "CM2 " + min, range, rows, cols

struct Header {
  int32_t kind = kFloat;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t header_bytes = 0;  // from the "\0B" marker to the data
  int64_t data_bytes = 0;    // the data after the header (per-column headers included)
  float min_value = 0.0f;    // compressed matrices: the global header
  float range = 0.0f;
};

// A header that cannot be read: `what` says why (for a message naming file, offset and key).
struct BadHeader : std::runtime_error {
  explicit BadHeader(const std::string& what) : std::runtime_error(what) {}
};

// Parses the header of the matrix starting at bytes[0] (its "\0B" marker) from `size` bytes (fewer than the
// header needs: "truncated"). Throws BadHeader: no binary marker (a text-mode matrix is named), an unknown or
// vector type, a missing size marker, negative dimensions, a size past what int64 holds.
Header parse_header(const uint8_t* bytes, size_t size);

// The header of the matrix whose "\0B" marker is at `offset` of the open file `fd`, read with pread, checked to
// follow `key_prefix` (the scp file's "key ", empty: not checked). Throws BadHeader (a key mismatch too).
Header read_header_at(int fd, int64_t offset, const std::string& key_prefix);

// The matrices of an archive read directly, found one after the other ("key " + header, the data skipped by its
// size): each key and the offset of its "\0B" marker. A broken matrix ends the scan (the size of what follows is
// unknown): `stop` says where and why (the matrices before it are kept).
struct ArchiveScan {
  std::vector<uint8_t> key_blob;        // key i is key_blob[key_offsets[i], key_offsets[i + 1])
  std::vector<int64_t> key_offsets{0};  // (matrices + 1)
  std::vector<int64_t> offsets;         // (matrices) of the "\0B" marker
  enum Stop : int32_t { kEnd = 0, kNoKey = 1, kBadHeader = 2 } stop = kEnd;
  int64_t stop_offset = -1;  // kNoKey: where a "key " was expected; kBadHeader: the header's offset
  std::string stop_key;      // kBadHeader: the matrix's key
  std::string stop_detail;   // kNoKey: up to 40 bytes found there; kBadHeader: why the header cannot be read
};

// Scans the archive open as `fd` (`size` bytes); keys longer than `max_key_bytes`, or holding NUL, '\n', '\t' or
// '\r', are no key. Throws std::runtime_error on an I/O error.
ArchiveScan scan_archive(int fd, int64_t size, size_t max_key_bytes);

struct Matrix {       // one utterance's matrix: the file it is in and where its "\0B" marker is
  int32_t file = 0;   // index into the descriptors
  int64_t offset = 0;
  int32_t kind = 0;   // as indexed: the header read again must agree
  int64_t rows = 0;
};

// A matrix that could not be read as it was indexed (the file changed, or was cut short): which one, where, why.
struct BadMatrix : std::runtime_error {
  BadMatrix(int64_t matrix, int64_t offset, const std::string& what)
      : std::runtime_error(what), matrix(matrix), offset(offset) {}
  int64_t matrix;
  int64_t offset;
};

// Reads the matrices one after the other into `out` (sum of rows x cols values of T: float or double). Throws
// BadMatrix when a header differs from the index (kind, rows, cols) or a file ends early.
template <class T>
void read_matrices(const std::vector<int>& fds, const std::vector<Matrix>& matrices, int64_t cols, T* out);

// out[t] = frames[t - left] .. frames[t + right] concatenated (indices clamped to t's sequence, sequence s holding
// frames seq_offsets[s] .. seq_offsets[s + 1] - 1).
template <class T>
void expand_context(const T* frames, int64_t dim, const int64_t* seq_offsets, int64_t sequences, int left, int right,
                    T* out);

}  // namespace cntkio::kaldi
