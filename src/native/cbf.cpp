// CBF reading and writing: every field is bounds-checked against the bytes read, little-endian.
#include "cbf.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "file_io.hpp"

namespace cntkio::cbf {

namespace {

static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE floats expected");

// Reads exactly `size` bytes, naming what was being read when the file ends first.
void read_or_fail(int fd, int64_t offset, int64_t size, char* out, const char* what, int64_t chunk = -1) {
  try {
    read_exact(fd, offset, size, out);
  } catch (const ShortRead& e) {
    throw CbfError(std::string("the file ends inside the ") + what, e.offset, chunk);
  }
}

// A cursor over bytes [begin, end) of a buffer that starts at file offset `base`.
class Bytes {
 public:
  Bytes(const char* data, int64_t size, int64_t base) : data_(data), size_(size), base_(base) {}

  template <class T>
  T take(const char* what) {
    T value;
    std::memcpy(&value, need(sizeof(T), what), sizeof(T));
    return value;
  }

  const char* need(int64_t bytes, const char* what) {
    if (bytes < 0 || bytes > size_ - at_) throw error(std::string("the data ends inside ") + what);
    const char* p = data_ + at_;
    at_ += bytes;
    return p;
  }

  CbfError error(const std::string& what) const { return CbfError(what, base_ + at_, chunk, sequence, stream); }
  int64_t offset() const { return base_ + at_; }
  int64_t remaining() const { return size_ - at_; }

  int64_t chunk = -1, sequence = -1;
  int32_t stream = -1;

 private:
  const char* data_;
  int64_t size_, base_, at_ = 0;
};

int64_t itemsize(const Stream& s) { return s.is_double ? 8 : 4; }

// Whether bytes are well-formed UTF-8 (no overlongs, surrogates or code points beyond U+10FFFF).
bool valid_utf8(const unsigned char* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    size_t extra;
    uint32_t min, code;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, min = 0x80, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, min = 0x800, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, min = 0x10000, code = c & 0x07;
    } else {
      return false;
    }
    if (n - i <= extra) return false;
    for (size_t k = 1; k <= extra; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      code = (code << 6) | (p[i + k] & 0x3F);
    }
    if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace

Header read_header(int fd, int64_t size) {
  if (size < 12 + 8 + 16) throw CbfError("too small to be a CNTK binary format file", 0);
  char start[12];
  read_or_fail(fd, 0, 12, start, "file header");
  Bytes head(start, 12, 0);
  if (head.take<uint64_t>("the magic number") != kMagic)
    throw CbfError("not a CNTK binary format file (wrong magic number)", 0);
  const uint32_t version = head.take<uint32_t>("the version");
  if (version != kVersion) throw CbfError("unsupported CBF version " + std::to_string(version) + " (expected 1)", 8);
  int64_t header_offset = 0;
  read_or_fail(fd, size - 8, 8, reinterpret_cast<char*>(&header_offset), "header offset");
  if (header_offset < 12 || header_offset > size - 8 - 16)
    throw CbfError("the header offset " + std::to_string(header_offset) + " is outside the file", size - 8);
  const int64_t header_size = size - 8 - header_offset;
  std::vector<char> buffer(static_cast<size_t>(header_size));
  read_or_fail(fd, header_offset, header_size, buffer.data(), "header");
  Bytes b(buffer.data(), header_size, header_offset);
  if (b.take<uint64_t>("the header's magic number") != kMagic)
    throw CbfError("the header does not start with the magic number", header_offset);
  Header h;
  h.header_offset = header_offset;
  const uint32_t chunks = b.take<uint32_t>("the chunk count");
  const uint32_t streams = b.take<uint32_t>("the stream count");
  if (streams == 0) throw b.error("the file has no streams");
  if (chunks == 0) throw b.error("the file has no chunks");
  if (static_cast<int64_t>(streams) * 10 > b.remaining()) throw b.error("more streams than the header can hold");
  for (uint32_t s = 0; s < streams; ++s) {
    b.stream = static_cast<int32_t>(s);
    Stream stream;
    const uint8_t encoding = b.take<uint8_t>("a stream's encoding");
    if (encoding > 1) throw b.error("unknown matrix encoding " + std::to_string(encoding) + " (0 dense, 1 sparse)");
    stream.sparse = encoding == 1;
    const uint32_t length = b.take<uint32_t>("a stream's name length");
    const int64_t name_at = b.offset();
    const char* name = b.need(length, "a stream's name");
    if (!valid_utf8(reinterpret_cast<const unsigned char*>(name), length))
      throw CbfError("a stream name is not valid UTF-8", name_at, -1, -1, static_cast<int32_t>(s));
    stream.name.assign(name, length);
    const uint8_t element = b.take<uint8_t>("a stream's element type");
    if (element > 1) throw b.error("unknown element type " + std::to_string(element) + " (0 float, 1 double)");
    stream.is_double = element == 1;
    stream.dim = b.take<uint32_t>("a stream's dimension");
    if (stream.dim == 0) throw b.error("stream '" + stream.name + "' has dimension 0");
    if (stream.sparse && stream.dim > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
      throw b.error("sparse stream '" + stream.name + "' has a dimension beyond int32");
    h.streams.push_back(std::move(stream));
  }
  b.stream = -1;
  if (b.remaining() != static_cast<int64_t>(chunks) * 16)
    throw b.error("the chunk table of " + std::to_string(chunks) + " chunks does not end where the header offset is");
  int64_t previous = 12;
  for (uint32_t c = 0; c < chunks; ++c) {
    b.chunk = c;
    const int64_t offset = b.take<int64_t>("the chunk table");
    const uint32_t sequences = b.take<uint32_t>("the chunk table");
    const uint32_t samples = b.take<uint32_t>("the chunk table");
    if (offset < previous || offset >= header_offset)
      throw CbfError("chunk " + std::to_string(c) + " starts at " + std::to_string(offset) +
                         ", outside the data or before the previous chunk",
                     b.offset() - 16, c);
    if (sequences == 0) throw CbfError("chunk " + std::to_string(c) + " has no sequences", b.offset() - 8, c);
    if (static_cast<int64_t>(sequences) * 4 > header_offset - offset)
      throw CbfError("chunk " + std::to_string(c) + " cannot hold its sequence lengths", b.offset() - 8, c);
    h.chunk_offsets.push_back(offset);
    h.chunk_sequences.push_back(sequences);
    h.chunk_samples.push_back(samples);
    previous = offset;
  }
  if (h.chunk_offsets[0] != 12) throw CbfError("the first chunk does not start right after the version", header_offset, 0);
  h.chunk_offsets.push_back(header_offset);
  return h;
}

std::vector<uint32_t> read_lengths(int fd, const Header& h) {
  std::vector<uint32_t> lengths;
  const size_t chunks = h.chunk_sequences.size();
  for (size_t c = 0; c < chunks; ++c) {
    const int64_t offset = h.chunk_offsets[c];
    const size_t first = lengths.size();
    lengths.resize(first + h.chunk_sequences[c]);
    read_or_fail(fd, offset, static_cast<int64_t>(h.chunk_sequences[c]) * 4, reinterpret_cast<char*>(lengths.data() + first),
                 "sequence lengths", static_cast<int64_t>(c));
    uint64_t total = 0;
    for (size_t i = first; i < lengths.size(); ++i) {
      if (lengths[i] == 0) {
        throw CbfError("sequence " + std::to_string(i - first) + " has length 0", offset + static_cast<int64_t>(i - first) * 4,
                       static_cast<int64_t>(c), static_cast<int64_t>(i - first));
      }
      total += lengths[i];
    }
    if (total != h.chunk_samples[c]) {
      throw CbfError("the sequence lengths of chunk " + std::to_string(c) + " add up to " + std::to_string(total) +
                         " samples, the chunk table says " + std::to_string(h.chunk_samples[c]),
                     offset, static_cast<int64_t>(c));
    }
  }
  return lengths;
}

namespace {

// Reads bytes [begin, end) of a file front to back: small fields through a buffer each thread keeps (in
// cache, refilled with pread), payloads of `kDirect` bytes or more straight into their destination.
class ChunkReader {
 public:
  static constexpr int64_t kBuffer = int64_t{1} << 20;
  static constexpr int64_t kDirect = int64_t{64} << 10;

  ChunkReader(int fd, int64_t begin, int64_t end, int64_t chunk) : fd_(fd), next_(begin), end_(end), chunk(chunk) {
    thread_local std::unique_ptr<char[]> buffer(new char[kBuffer]);
    buffer_ = buffer.get();
  }

  template <class T>
  T take(const char* what) {
    T value;
    read(reinterpret_cast<char*>(&value), sizeof(T), what);
    return value;
  }

  // Copies the next `bytes` bytes into `out`.
  void read(char* out, int64_t bytes, const char* what) {
    if (bytes < 0 || bytes > remaining()) throw error(std::string("the data ends inside ") + what);
    if (bytes == 0) return;  // `out` may be the data() of an empty vector (null): memcpy must not see it
    const int64_t buffered = std::min(bytes, filled_ - at_);
    std::memcpy(out, buffer_ + at_, static_cast<size_t>(buffered));
    at_ += buffered;
    out += buffered;
    bytes -= buffered;
    if (bytes == 0) return;
    if (bytes >= kDirect) {  // the buffer is empty here: read the payload where it goes
      read_or_fail(fd_, next_, bytes, out, "chunk", chunk);
      next_ += bytes;
      return;
    }
    refill();
    std::memcpy(out, buffer_, static_cast<size_t>(bytes));
    at_ = bytes;
  }

  int64_t offset() const { return next_ - (filled_ - at_); }
  int64_t remaining() const { return end_ - offset(); }
  CbfError error(const std::string& what) const { return CbfError(what, offset(), chunk, sequence, stream); }

  int64_t sequence = -1;
  int32_t stream = -1;

 private:
  void refill() {
    const int64_t bytes = std::min(kBuffer, end_ - next_);
    read_or_fail(fd_, next_, bytes, buffer_, "chunk", chunk);
    next_ += bytes;
    filled_ = bytes;
    at_ = 0;
  }

  int fd_;
  char* buffer_ = nullptr;
  int64_t next_, end_;         // file offset of the next byte not yet buffered, end of the chunk
  int64_t filled_ = 0, at_ = 0;  // bytes in the buffer, bytes of it consumed
 public:
  const int64_t chunk;
};

// Sorts the entries of one sparse sample by index (with their values): writers must sort, some did not.
void sort_sample(int32_t* indices, char* values, int32_t count, int64_t item) {
  std::vector<std::pair<int32_t, int32_t>> order(static_cast<size_t>(count));
  for (int32_t e = 0; e < count; ++e) order[e] = {indices[e], e};
  std::stable_sort(order.begin(), order.end());
  std::vector<char> copy(values, values + count * item);
  for (int32_t e = 0; e < count; ++e) {
    indices[e] = order[e].first;
    std::memcpy(values + e * item, copy.data() + order[e].second * item, static_cast<size_t>(item));
  }
}

}  // namespace

std::vector<Column> decode_chunk(int fd, const Header& h, int64_t chunk, const uint32_t* checked_lengths) {
  if (chunk < 0 || chunk >= static_cast<int64_t>(h.chunk_sequences.size())) throw std::out_of_range("chunk out of range");
  const int64_t begin = h.chunk_offsets[chunk], end = h.chunk_offsets[chunk + 1];
  ChunkReader r(fd, begin, end, chunk);
  const int64_t sequences = h.chunk_sequences[chunk];
  const int64_t max_samples = h.chunk_samples[chunk];  // every stream has at most the chunk's samples
  std::vector<uint32_t> lengths(static_cast<size_t>(sequences));
  r.read(reinterpret_cast<char*>(lengths.data()), sequences * 4, "the sequence lengths");
  if (std::memcmp(lengths.data(), checked_lengths, static_cast<size_t>(sequences) * 4) != 0)
    throw CbfError("the chunk's sequence lengths changed since the file was opened (rewritten in place?)", begin, chunk);
  std::vector<Column> columns(h.streams.size());
  thread_local std::vector<int32_t> per_sample_buffer;  // a sparse sequence's non-zeros per sample
  std::vector<int32_t>& per_sample = per_sample_buffer;
  for (size_t s = 0; s < h.streams.size(); ++s) {
    const Stream& stream = h.streams[s];
    const int64_t item = itemsize(stream), dim = stream.dim;
    Column& col = columns[s];
    r.stream = static_cast<int32_t>(s);
    col.seq_offsets.resize(static_cast<size_t>(sequences) + 1);
    col.seq_offsets[0] = 0;
    // Output arrays sized for the most the chunk can hold (pages never written are never touched).
    if (stream.sparse) {
      const int64_t max_nnz = r.remaining() / (item + 4);
      col.values.resize(static_cast<size_t>(max_nnz * item));
      col.indices.resize(static_cast<size_t>(max_nnz));
      col.indptr.resize(static_cast<size_t>(max_samples) + 1);
      col.indptr[0] = 0;
    } else {
      const int64_t fit = std::min(max_samples, r.remaining() / (dim * item));  // what the bytes can hold
      col.values.resize(static_cast<size_t>(fit * dim * item));
    }
    int64_t samples_at = 0, values_at = 0;
    for (int64_t q = 0; q < sequences; ++q) {
      r.sequence = q;
      const uint32_t samples = r.take<uint32_t>("a sequence's sample count");
      if (samples > lengths[q]) {
        throw r.error("stream '" + stream.name + "' has " + std::to_string(samples) + " samples in a sequence of length " +
                      std::to_string(lengths[q]));
      }
      col.seq_offsets[q + 1] = col.seq_offsets[q] + samples;
      if (!stream.sparse) {
        if (static_cast<int64_t>(samples) > r.remaining() / (dim * item))
          throw r.error("the data ends inside a sequence's dense values");
        const int64_t bytes = static_cast<int64_t>(samples) * dim * item;
        r.read(col.values.data() + samples_at * dim * item, bytes, "a sequence's dense values");
        samples_at += samples;
        continue;
      }
      if (samples_at + static_cast<int64_t>(samples) > max_samples)  // cannot happen with checked lengths
        throw r.error("more samples than the chunk table allows");
      const int32_t nnz = r.take<int32_t>("a sequence's non-zero count");
      if (nnz < 0) throw r.error("negative non-zero count " + std::to_string(nnz));
      if (static_cast<int64_t>(nnz) * (item + 4) + static_cast<int64_t>(samples) * 4 > r.remaining())
        throw r.error("the data ends inside a sequence's sparse values");
      r.read(col.values.data() + values_at * item, static_cast<int64_t>(nnz) * item, "a sequence's sparse values");
      const int64_t indices_at = r.offset();
      int32_t* indices = col.indices.data() + values_at;
      r.read(reinterpret_cast<char*>(indices), static_cast<int64_t>(nnz) * 4, "a sequence's sparse indices");
      const int64_t counts_at = r.offset();
      // The non-zeros per sample go into indptr (as counts first, then summed in place).
      int64_t* counts = col.indptr.data() + samples_at + 1;
      per_sample.resize(samples);
      r.read(reinterpret_cast<char*>(per_sample.data()), static_cast<int64_t>(samples) * 4,
             "a sequence's non-zeros per sample");
      // Every index in [0, dim): one branch-free pass (a negative index is a huge unsigned one); the
      // offending entry is looked for only when there is one.
      uint32_t largest = 0;
      for (int32_t e = 0; e < nnz; ++e) largest = std::max(largest, static_cast<uint32_t>(indices[e]));
      if (nnz > 0 && largest >= stream.dim) {
        int32_t e = 0;
        while (static_cast<uint32_t>(indices[e]) < stream.dim) ++e;
        throw CbfError("sparse index " + std::to_string(indices[e]) + " of stream '" + stream.name + "' is outside [0, " +
                           std::to_string(stream.dim) + ")",
                       indices_at + static_cast<int64_t>(e) * 4, chunk, q, static_cast<int32_t>(s));
      }
      int64_t used = 0;
      for (uint32_t k = 0; k < samples; ++k) {
        const int32_t count = per_sample[k];
        if (count < 0 || count > nnz - used) {
          throw CbfError("the non-zeros per sample of stream '" + stream.name + "' do not add up to " + std::to_string(nnz),
                         counts_at + k * 4, chunk, q, static_cast<int32_t>(s));
        }
        if (count > 1) {
          int32_t* row = indices + used;
          bool sorted = true;
          for (int32_t e = 1; e < count; ++e) sorted = sorted && row[e - 1] <= row[e];
          if (!sorted) sort_sample(row, col.values.data() + (values_at + used) * item, count, item);
        }
        used += count;
        counts[k] = values_at + used;
      }
      if (used != nnz) {
        throw CbfError("the non-zeros per sample of stream '" + stream.name + "' add up to " + std::to_string(used) +
                           ", the sequence says " + std::to_string(nnz),
                       counts_at, chunk, q, static_cast<int32_t>(s));
      }
      values_at += nnz;
      samples_at += samples;
    }
    r.sequence = -1;
    if (stream.sparse) {
      col.values.resize(static_cast<size_t>(values_at * item));
      col.indices.resize(static_cast<size_t>(values_at));
      col.indptr.resize(static_cast<size_t>(samples_at) + 1);
    } else {
      col.values.resize(static_cast<size_t>(samples_at * dim * item));
    }
  }
  r.stream = -1;
  // The last chunk runs to the header; any other must end exactly where the next one starts.
  if (chunk + 1 < static_cast<int64_t>(h.chunk_sequences.size()) && r.remaining() != 0)
    throw r.error(std::to_string(r.remaining()) + " bytes between the chunk's data and the next chunk");
  return columns;
}

void encode_stream(std::vector<char>& out, bool sparse, int64_t dim, int64_t itemsize, const char* values,
                   const int32_t* indices, const int64_t* indptr, const int64_t* seq_offsets, int64_t first,
                   int64_t last) {
  auto put = [&out](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + n);
  };
  for (int64_t q = first; q < last; ++q) {
    const int64_t a = seq_offsets[q], n = seq_offsets[q + 1] - a;
    const uint32_t samples = static_cast<uint32_t>(n);
    put(&samples, 4);
    if (!sparse) {
      put(values + a * dim * itemsize, static_cast<size_t>(n * dim * itemsize));
      continue;
    }
    const int64_t e0 = indptr[a], e1 = indptr[a + n];
    const int32_t nnz = static_cast<int32_t>(e1 - e0);
    put(&nnz, 4);
    put(values + e0 * itemsize, static_cast<size_t>((e1 - e0) * itemsize));
    put(indices + e0, static_cast<size_t>(e1 - e0) * 4);
    for (int64_t r = a; r < a + n; ++r) {
      const int32_t count = static_cast<int32_t>(indptr[r + 1] - indptr[r]);
      put(&count, 4);
    }
  }
}

}  // namespace cntkio::cbf
