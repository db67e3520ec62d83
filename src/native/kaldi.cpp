// Kaldi binary matrix headers and decoding (kaldi.hpp).
#include "kaldi.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>

#include <sys/uio.h>

#include "file_io.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Kaldi binary matrices are read on little-endian hosts");

namespace cntkio::kaldi {
namespace {

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

const char* kind_name(int32_t kind) {
  switch (kind) {
    case kFloat: return "FM";
    case kDouble: return "DM";
    case kColumnPercentiles: return "CM";
    case kTwoByte: return "CM2";
    default: return "CM3";
  }
}

std::string printable(const uint8_t* bytes, size_t size) {
  std::string text;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      text += c;
    } else {
      static const char digits[] = "0123456789abcdef";
      text += "\\x";
      text += digits[bytes[i] >> 4];
      text += digits[bytes[i] & 15];
    }
  }
  return text;
}

// kaldiio's GlobalHeader.uint_to_float in float32: min + (value * range) / c, each step rounded to float.
inline float uint_to_float(float min_value, float range, float c, float value) {
  const float scaled = value * range;
  const float unit = scaled / c;
  return min_value + unit;
}

// kaldiio's PerColHeader.char_to_float (Kaldi's CharToFloat with float32 steps).
inline float char_to_float(const float* p, float value) {
  if (value <= 64.0f) return p[0] + ((p[1] - p[0]) * value) * static_cast<float>(1 / 64.0);
  if (value <= 192.0f) return p[1] + ((p[2] - p[1]) * (value - 64.0f)) * static_cast<float>(1 / 128.0);
  return p[2] + ((p[3] - p[2]) * (value - 192.0f)) * static_cast<float>(1 / 63.0);
}

void read_bytes(int fd, int64_t offset, int64_t size, char* out, int64_t matrix, const char* what) {
  const int64_t done = read_some(fd, offset, size, out);
  if (done < size) {
    throw BadMatrix(matrix, offset + done,
                    std::string("the archive ended inside the ") + what + " of this matrix (truncated, or changed "
                    "since it was indexed)");
  }
}

template <class T>
void decode(const Header& h, const uint8_t* data, T* out) {
  const int64_t rows = h.rows, cols = h.cols, count = rows * cols;
  switch (h.kind) {
    case kFloat:
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(load_f32(data + 4 * i));
      break;
    case kDouble:
      for (int64_t i = 0; i < count; ++i) {
        double v;
        std::memcpy(&v, data + 8 * i, 8);
        out[i] = static_cast<T>(v);
      }
      break;
    case kTwoByte:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        out[i] = static_cast<T>(uint_to_float(h.min_value, h.range, 65535.0f, static_cast<float>(v)));
      }
      break;
    case kOneByte:
      for (int64_t i = 0; i < count; ++i)
        out[i] = static_cast<T>(uint_to_float(h.min_value, h.range, 255.0f, static_cast<float>(data[i])));
      break;
    default: {  // per-column percentile headers (4 x uint16 per column), then the bytes column by column
      thread_local std::vector<float> table;
      table.resize(256);
      float p[4];
      const uint8_t* bytes = data + 8 * cols;
      for (int64_t j = 0; j < cols; ++j) {
        for (int q = 0; q < 4; ++q) {
          uint16_t v;
          std::memcpy(&v, data + 8 * j + 2 * q, 2);
          p[q] = uint_to_float(h.min_value, h.range, 65535.0f, static_cast<float>(v));
        }
        for (int b = 0; b < 256; ++b) table[static_cast<size_t>(b)] = char_to_float(p, static_cast<float>(b));
        const uint8_t* column = bytes + j * rows;
        for (int64_t i = 0; i < rows; ++i) out[i * cols + j] = static_cast<T>(table[column[i]]);
      }
    }
  }
}

}  // namespace

Header parse_header(const uint8_t* bytes, size_t size) {
  if (size < 2 || bytes[0] != 0 || bytes[1] != 'B') {
    size_t first = 0;
    while (first < size && (bytes[first] == ' ' || bytes[first] == '\t')) ++first;
    if (first < size && bytes[first] == '[')
      throw BadHeader("a text-mode Kaldi matrix ('[ ... ]'): only binary archives are read (convert it with "
                      "copy-feats ark:IN ark,scp:OUT.ark,OUT.scp)");
    if (size < 2) throw BadHeader("the archive ends before the matrix's binary marker \\0B (truncated)");
    throw BadHeader("no binary marker \\0B where the matrix starts (found '" +
                    printable(bytes, std::min<size_t>(size, 8)) + "'): a wrong offset, or not a Kaldi archive");
  }
  Header h;
  size_t at;
  if (size >= 5 && std::memcmp(bytes + 2, "FM ", 3) == 0) {
    h.kind = kFloat, at = 5;
  } else if (size >= 5 && std::memcmp(bytes + 2, "DM ", 3) == 0) {
    h.kind = kDouble, at = 5;
  } else if (size >= 5 && std::memcmp(bytes + 2, "CM ", 3) == 0) {
    h.kind = kColumnPercentiles, at = 5;
  } else if (size >= 6 && std::memcmp(bytes + 2, "CM2 ", 4) == 0) {
    h.kind = kTwoByte, at = 6;
  } else if (size >= 6 && std::memcmp(bytes + 2, "CM3 ", 4) == 0) {
    h.kind = kOneByte, at = 6;
  } else {
    size_t end = 2;
    while (end < size && end < 12 && bytes[end] != ' ') ++end;
    const std::string token = printable(bytes + 2, end - 2);
    if (token == "FV" || token == "DV")
      throw BadHeader("a Kaldi vector (" + token + "), not a matrix: feature archives hold matrices");
    if (end >= size && size < 6) throw BadHeader("the archive ends inside the matrix's type token (truncated)");
    throw BadHeader("unknown Kaldi matrix type '" + token + "' (FM, DM, CM, CM2 and CM3 are read)");
  }
  if (h.kind == kFloat || h.kind == kDouble) {
    if (size < at + 10) throw BadHeader(std::string("the archive ends inside the ") + kind_name(h.kind) +
                                        " header (truncated)");
    if (bytes[at] != 4 || bytes[at + 5] != 4)
      throw BadHeader(std::string("the ") + kind_name(h.kind) + " header's size markers are not \\4 (damaged)");
    h.rows = load_i32(bytes + at + 1);
    h.cols = load_i32(bytes + at + 6);
    h.header_bytes = static_cast<int64_t>(at) + 10;
  } else {
    if (size < at + 16) throw BadHeader(std::string("the archive ends inside the ") + kind_name(h.kind) +
                                        " header (truncated)");
    h.min_value = load_f32(bytes + at);
    h.range = load_f32(bytes + at + 4);
    h.rows = load_i32(bytes + at + 8);
    h.cols = load_i32(bytes + at + 12);
    h.header_bytes = static_cast<int64_t>(at) + 16;
  }
  if (h.rows < 0 || h.cols < 0)
    throw BadHeader("negative dimensions " + std::to_string(h.rows) + " x " + std::to_string(h.cols));
  const int64_t count = h.rows * h.cols;  // < 2**62
  const int64_t element = h.kind == kFloat ? 4 : h.kind == kDouble ? 8 : h.kind == kTwoByte ? 2 : 1;
  if (count > std::numeric_limits<int64_t>::max() / 16) throw BadHeader("matrix too large");
  h.data_bytes = count * element + (h.kind == kColumnPercentiles ? 8 * h.cols : 0);
  return h;
}

Header read_header_at(int fd, int64_t offset, const std::string& key_prefix) {
  const int64_t prefix = static_cast<int64_t>(key_prefix.size());
  if (offset < prefix)
    throw BadHeader("offset " + std::to_string(offset) + " is too close to the start of the archive for the key '" +
                    key_prefix.substr(0, key_prefix.size() - 1) + "' before it");
  std::vector<uint8_t> block(static_cast<size_t>(prefix) + kMaxHeaderBytes);
  const int64_t got = read_some(fd, offset - prefix, static_cast<int64_t>(block.size()),
                                reinterpret_cast<char*>(block.data()));
  if (got <= prefix) throw BadHeader("offset " + std::to_string(offset) + " is past the end of the archive");
  if (prefix > 0 && std::memcmp(block.data(), key_prefix.data(), static_cast<size_t>(prefix)) != 0) {
    throw BadHeader("key mismatch: the scp file gives '" + key_prefix.substr(0, key_prefix.size() - 1) +
                    "', the archive holds '" + printable(block.data(), static_cast<size_t>(prefix)) +
                    "' before this offset (a stale scp file, or a wrong offset)");
  }
  return parse_header(block.data() + prefix, static_cast<size_t>(got - prefix));
}

ArchiveScan scan_archive(int fd, int64_t size, size_t max_key_bytes) {
  ArchiveScan out;
  std::vector<uint8_t> block(max_key_bytes + 1 + kMaxHeaderBytes);
  const size_t first_read = std::min<size_t>(block.size(), 256);  // (a short key and the header: read more only if not)
  for (int64_t position = 0; position < size;) {
    size_t n = static_cast<size_t>(
        read_some(fd, position, static_cast<int64_t>(first_read), reinterpret_cast<char*>(block.data())));
    size_t space = 0;
    while (space < n && space <= max_key_bytes && block[space] != ' ') ++space;
    if (n == first_read && (space == n || n - space - 1 < kMaxHeaderBytes) && n < block.size()) {
      n = static_cast<size_t>(
          read_some(fd, position, static_cast<int64_t>(block.size()), reinterpret_cast<char*>(block.data())));
      while (space < n && space <= max_key_bytes && block[space] != ' ') ++space;
    }
    bool key = space > 0 && space < n && space <= max_key_bytes;
    for (size_t i = 0; key && i < space; ++i) key = block[i] != 0 && block[i] != '\n' && block[i] != '\t' && block[i] != '\r';
    if (!key) {
      out.stop = ArchiveScan::kNoKey;
      out.stop_offset = position;
      out.stop_detail.assign(reinterpret_cast<const char*>(block.data()), std::min<size_t>(n, 40));
      break;
    }
    const int64_t offset = position + static_cast<int64_t>(space) + 1;
    Header h;
    try {
      h = parse_header(block.data() + space + 1, n - space - 1);
    } catch (const BadHeader& e) {
      out.stop = ArchiveScan::kBadHeader;
      out.stop_offset = offset;
      out.stop_key.assign(reinterpret_cast<const char*>(block.data()), space);
      out.stop_detail = e.what();
      break;
    }
    out.key_blob.insert(out.key_blob.end(), block.begin(), block.begin() + static_cast<std::ptrdiff_t>(space));
    out.key_offsets.push_back(static_cast<int64_t>(out.key_blob.size()));
    out.offsets.push_back(offset);
    if (h.data_bytes > size - offset - h.header_bytes) break;  // (the last matrix runs past the end: its read says so)
    position = offset + h.header_bytes + h.data_bytes;
  }
  return out;
}

namespace {

int64_t header_bytes_of(int32_t kind) {
  return kind == kFloat || kind == kDouble ? 15 : kind == kColumnPercentiles ? 21 : 22;
}

int64_t data_bytes_of(int32_t kind, int64_t rows, int64_t cols) {
  const int64_t element = kind == kFloat ? 4 : kind == kDouble ? 8 : kind == kTwoByte ? 2 : 1;
  return rows * cols * element + (kind == kColumnPercentiles ? 8 * cols : 0);
}

// The header read again (`head`, header_bytes_of(kind) bytes) must be the indexed one.
void check_header(const uint8_t* head, const Matrix& matrix, int64_t cols, int64_t index) {
  Header h;
  try {
    h = parse_header(head, static_cast<size_t>(header_bytes_of(matrix.kind)));
  } catch (const BadHeader& e) {
    throw BadMatrix(index, matrix.offset, std::string(e.what()) + " (the archive changed since it was indexed?)");
  }
  if (h.kind != matrix.kind || h.rows != matrix.rows || h.cols != cols) {
    throw BadMatrix(index, matrix.offset,
                    std::string("the matrix is ") + kind_name(h.kind) + " " + std::to_string(h.rows) + " x " +
                        std::to_string(h.cols) + ", indexed as " + kind_name(matrix.kind) + " " +
                        std::to_string(matrix.rows) + " x " + std::to_string(cols) +
                        " (the archive changed since it was indexed)");
  }
}

// One matrix: its header and data read (one pread when staged), checked and decoded into `rows_out`.
template <class T>
void read_one(int fd, const Matrix& matrix, int64_t cols, int64_t index, T* rows_out) {
  thread_local std::vector<char> staging;
  const int64_t header_bytes = header_bytes_of(matrix.kind);
  const int64_t data_bytes = data_bytes_of(matrix.kind, matrix.rows, cols);
  if (std::is_same_v<T, float> && matrix.kind == kFloat) {  // as stored: straight into the output
    uint8_t head[kMaxHeaderBytes];
    read_bytes(fd, matrix.offset, header_bytes, reinterpret_cast<char*>(head), index, "header");
    check_header(head, matrix, cols, index);
    read_bytes(fd, matrix.offset + header_bytes, data_bytes, reinterpret_cast<char*>(rows_out), index, "data");
    return;
  }
  staging.resize(static_cast<size_t>(header_bytes + data_bytes));
  const int64_t got = read_some(fd, matrix.offset, header_bytes + data_bytes, staging.data());
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(staging.data());
  if (got >= header_bytes) check_header(bytes, matrix, cols, index);  // (a header not as indexed explains the rest)
  if (got < header_bytes + data_bytes) {
    throw BadMatrix(index, matrix.offset + got,
                    "the archive ended inside this matrix (truncated, or changed since it was indexed)");
  }
  Header h = parse_header(bytes, static_cast<size_t>(header_bytes));
  decode<T>(h, bytes + header_bytes, rows_out);
  if (staging.capacity() > (size_t{64} << 20)) std::vector<char>().swap(staging);  // keep no huge buffer per thread
}

constexpr size_t kBatchMatrices = 400;  // matrices one preadv reads (2 buffers each, under IOV_MAX = 1024)
constexpr int64_t kMaxGap = 4096;       // bytes between two matrices (the next key) still read in the same call

}  // namespace

template <class T>
void read_matrices(const std::vector<int>& fds, const std::vector<Matrix>& matrices, int64_t cols, T* out) {
  std::vector<int64_t> starts(matrices.size() + 1, 0);  // each matrix's first value in `out`
  for (size_t m = 0; m < matrices.size(); ++m) starts[m + 1] = starts[m] + matrices[m].rows * cols;
  std::vector<iovec> buffers;
  std::vector<uint8_t> heads;  // the headers (and the keys between matrices) of a batch
  std::vector<size_t> head_at;  // where each matrix's header is in `heads`
  for (size_t m = 0; m < matrices.size();) {
    // float32 matrices read as float32, one after the other in one archive: one preadv scatters their rows
    // straight into the output, their headers and the keys between them into `heads`
    size_t stop = m + 1;
    if constexpr (std::is_same_v<T, float>) {
      if (matrices[m].kind == kFloat) {
        int64_t end = matrices[m].offset + header_bytes_of(kFloat) + data_bytes_of(kFloat, matrices[m].rows, cols);
        while (stop < matrices.size() && stop - m < kBatchMatrices && matrices[stop].kind == kFloat &&
               matrices[stop].file == matrices[m].file && matrices[stop].offset >= end &&
               matrices[stop].offset - end <= kMaxGap) {
          end = matrices[stop].offset + header_bytes_of(kFloat) + data_bytes_of(kFloat, matrices[stop].rows, cols);
          ++stop;
        }
      }
    }
    if (stop == m + 1) {
      read_one<T>(fds[static_cast<size_t>(matrices[m].file)], matrices[m], cols, static_cast<int64_t>(m),
                  out + starts[m]);
      ++m;
      continue;
    }
    const int64_t first = matrices[m].offset, header_bytes = header_bytes_of(kFloat);
    int64_t expected = 0, position = first;
    int64_t skipped = 0;  // the keys and headers of the batch
    for (size_t i = m, end = static_cast<size_t>(first); i < stop; ++i) {
      skipped += matrices[i].offset + header_bytes - static_cast<int64_t>(end);
      end = static_cast<size_t>(matrices[i].offset + header_bytes + data_bytes_of(kFloat, matrices[i].rows, cols));
    }
    heads.resize(static_cast<size_t>(skipped));
    head_at.clear();
    buffers.clear();
    size_t used = 0;
    for (size_t i = m; i < stop; ++i) {
      const int64_t skip = matrices[i].offset + header_bytes - position;  // the key before it, and its header
      buffers.push_back({heads.data() + used, static_cast<size_t>(skip)});
      used += static_cast<size_t>(skip);
      head_at.push_back(used - static_cast<size_t>(header_bytes));
      const int64_t data_bytes = data_bytes_of(kFloat, matrices[i].rows, cols);
      buffers.push_back({reinterpret_cast<char*>(out + starts[i]), static_cast<size_t>(data_bytes)});
      expected += skip + data_bytes;
      position += skip + data_bytes;
    }
    ssize_t got;
    do {
      got = ::preadv(fds[static_cast<size_t>(matrices[m].file)], buffers.data(), static_cast<int>(buffers.size()),
                     static_cast<off_t>(first));
    } while (got < 0 && errno == EINTR);
    if (got != expected) {  // short (the archive was cut) or failed: matrix by matrix, naming the one that fails
      for (size_t i = m; i < stop; ++i)
        read_one<T>(fds[static_cast<size_t>(matrices[i].file)], matrices[i], cols, static_cast<int64_t>(i),
                    out + starts[i]);
    } else {
      for (size_t i = m; i < stop; ++i)
        check_header(heads.data() + head_at[i - m], matrices[i], cols, static_cast<int64_t>(i));
    }
    m = stop;
  }
}

template <class T>
void expand_context(const T* frames, int64_t dim, const int64_t* seq_offsets, int64_t sequences, int left, int right,
                    T* out) {
  const int64_t width = dim * (1 + left + right);
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t first = seq_offsets[s], last = seq_offsets[s + 1] - 1;
    for (int64_t t = first; t <= last; ++t) {
      T* row = out + t * width;
      for (int j = -left; j <= right; ++j) {
        const T* source = frames + std::clamp<int64_t>(t + j, first, last) * dim;
        std::memcpy(row + (j + left) * dim, source, sizeof(T) * static_cast<size_t>(dim));
      }
    }
  }
}

template void read_matrices<float>(const std::vector<int>&, const std::vector<Matrix>&, int64_t, float*);
template void read_matrices<double>(const std::vector<int>&, const std::vector<Matrix>&, int64_t, double*);
template void expand_context<float>(const float*, int64_t, const int64_t*, int64_t, int, int, float*);
template void expand_context<double>(const double*, int64_t, const int64_t*, int64_t, int, int, double*);

}  // namespace cntkio::kaldi
