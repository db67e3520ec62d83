// Lines of a file read with pread in growing blocks (memchr finds each '\n'), for the text index scanners.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "file_io.hpp"

namespace cntkio {

constexpr std::string_view kUtf8Bom = "\xef\xbb\xbf";

// Calls on_line(text, offset, line) for every line of bytes [0, size) of the file (text without its '\n'; a UTF-8
// byte order mark at the start of the file left out of the first line's text and offset), until on_line returns
// false; returns whether every call returned true. The empty piece after a final '\n' is not a line.
template <class OnLine>
bool for_each_line(int fd, int64_t size, int64_t block, OnLine&& on_line) {
  std::vector<char> buffer(static_cast<size_t>(std::max<int64_t>(block, 256)));
  int64_t base = 0;      // file offset of buffer[0]
  int64_t length = 0;    // bytes in the buffer
  int64_t read_at = 0;   // next file offset to read
  int64_t pos = 0;       // start of the current line in the buffer
  int64_t scanned = 0;   // bytes of the current line already searched for '\n'
  int64_t line = 1;
  bool eof = size <= 0;
  while (true) {
    const char* data = buffer.data();
    const char* newline =
        static_cast<const char*>(std::memchr(data + pos + scanned, '\n', static_cast<size_t>(length - pos - scanned)));
    if (newline == nullptr && !eof) {  // the line goes on past the buffer: keep its start, read more
      scanned = length - pos;
      if (pos > 0) {
        std::memmove(buffer.data(), buffer.data() + pos, static_cast<size_t>(length - pos));
        base += pos;
        length -= pos;
        pos = 0;
      }
      if (length == static_cast<int64_t>(buffer.size())) buffer.resize(buffer.size() * 2);
      const int64_t want = std::min<int64_t>(static_cast<int64_t>(buffer.size()) - length, size - read_at);
      const int64_t n = read_some(fd, read_at, want, buffer.data() + length);
      length += n;
      read_at += n;
      if (n < want || read_at >= size) eof = true;
      continue;
    }
    const int64_t end = newline != nullptr ? newline - data : length;
    if (newline == nullptr && end == pos) return true;  // nothing after the last '\n'
    int64_t begin = pos;
    if (base + begin == 0 && end - begin >= 3 && std::memcmp(data, kUtf8Bom.data(), 3) == 0) begin += 3;
    if (!on_line(std::string_view(data + begin, static_cast<size_t>(end - begin)), base + begin, line)) return false;
    if (newline == nullptr) return true;
    pos = end + 1;
    scanned = 0;
    ++line;
  }
}

}  // namespace cntkio
