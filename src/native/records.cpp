// Framing of length-prefixed and TFRecord files, and CRC-32C (see records.hpp).
#include "records.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "file_io.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CNTKIO_CRC32C_SSE42 1
#endif

namespace cntkio::records {

namespace {

// Slicing-by-8 tables of the reflected Castagnoli polynomial.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82f63b78u : 0u);
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k)
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

uint32_t crc32c_software(const uint8_t* p, size_t n, uint32_t crc) {
  const auto& t = tables().t;
  uint32_t c = ~crc;
  while (n >= 8) {
    const uint32_t lo = load_u32le(p) ^ c, hi = load_u32le(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return ~c;
}

#ifdef CNTKIO_CRC32C_SSE42
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc) {
#ifdef CNTKIO_CRC32C_SSE42
  if (has_sse42()) return crc32c_sse42(data, n, crc);
#endif
  return crc32c_software(data, n, crc);
}

uint32_t crc32c_portable(const uint8_t* data, size_t n, uint32_t crc) { return crc32c_software(data, n, crc); }

WalkResult walk(const ReadFn& read, int64_t begin, int64_t end, Framing framing, int64_t block) {
  const int64_t header = header_bytes(framing), trailer = trailer_bytes(framing);
  if (begin < 0 || end < begin) throw std::invalid_argument("invalid byte range");
  block = std::max<int64_t>(block, 64);
  const int64_t small_read = std::min<int64_t>(block, 4096);
  WalkResult result;
  std::vector<char> buffer(static_cast<size_t>(block));
  int64_t buffer_begin = 0, buffer_size = 0;  // the buffer holds bytes [buffer_begin, buffer_begin + buffer_size)
  int64_t last_span = 0;                      // bytes of the previous record: after a long one, read little
  auto fail = [&](int64_t at, std::string why) {
    result.error = std::move(why);
    result.error_offset = at;
  };
  int64_t pos = begin;
  while (pos < end) {
    const int64_t remaining = end - pos;
    if (remaining < header) {
      fail(pos, "truncated record header: the file ends " + std::to_string(remaining) + " byte(s) after the last " +
                    "complete record, and a record header is " + std::to_string(header) + " bytes");
      break;
    }
    if (pos < buffer_begin || pos + header > buffer_begin + buffer_size) {
      const int64_t want = std::min(last_span >= block ? small_read : block, remaining);
      buffer_begin = pos;
      buffer_size = read(pos, want, buffer.data());
      if (buffer_size < header) {
        fail(pos, "the file ends at byte " + std::to_string(pos + buffer_size) +
                      ", inside a record header (it is shorter than when its size was taken)");
        break;
      }
    }
    const auto* h = reinterpret_cast<const uint8_t*>(buffer.data() + (pos - buffer_begin));
    const uint64_t length = load_u64le(h);
    if (framing == Framing::TFRecord && mask_crc(crc32c(h, 8)) != load_u32le(h + 8)) {
      fail(pos, "corrupt record header: the CRC of its length field (" + std::to_string(length) +
                    ") does not match (not a TFRecord file, or a damaged one)");
      break;
    }
    if (remaining < header + trailer || length > static_cast<uint64_t>(remaining - header - trailer)) {
      fail(pos, "truncated record: its header says " + std::to_string(length) + " bytes of data" +
                    (trailer ? " (and a " + std::to_string(trailer) + "-byte CRC)" : std::string()) +
                    ", but the file ends " + std::to_string(remaining - header) + " byte(s) after the header");
      break;
    }
    result.starts.push_back(pos);
    last_span = header + static_cast<int64_t>(length) + trailer;
    pos += last_span;
  }
  return result;
}

WalkResult walk_file(int fd, int64_t begin, int64_t end, Framing framing, int64_t block) {
  return walk([fd](int64_t offset, int64_t size, char* out) { return read_some(fd, offset, size, out); }, begin, end,
              framing, block);
}

std::vector<int64_t> bad_data_crcs(const uint8_t* buffer, int64_t size, const int64_t* starts, int64_t n) {
  constexpr int64_t header = 12, trailer = 4;
  std::vector<int64_t> bad;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = starts[i];
    if (s < 0 || size - s < header + trailer) throw std::invalid_argument("a record header outside the buffer");
    const uint64_t length = load_u64le(buffer + s);
    if (length > static_cast<uint64_t>(size - s - header - trailer))
      throw std::invalid_argument("a record runs past the end of the buffer");
    const uint8_t* data = buffer + s + header;
    if (mask_crc(crc32c(data, static_cast<size_t>(length))) != load_u32le(data + length)) bad.push_back(i);
  }
  return bad;
}

}  // namespace cntkio::records
