// Image map and base64 image file scanners, and the base64 decoder (see image_index.hpp). Lines are found with
// memchr in blocks read with pread; fields are split on tabs with memchr too. Paths and zip archives get ids from
// small open-addressing tables as they come.
#include "image_index.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "file_io.hpp"
#include "line_reader.hpp"
#include "text_intern.hpp"

namespace cntkio::image {

namespace {

constexpr int64_t kMaxRows = INT32_MAX - 1;  // rows, lines and distinct texts are int32 columns
constexpr std::string_view kDots = "...";

// A line of spaces, tabs, '\r', '\v' and '\f' only (or nothing).
bool blank(std::string_view text) {
  for (const char c : text) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\v' && c != '\f') return false;
  }
  return true;
}

// The bytes of the valid UTF-8 character at p (left bytes available), or 0 when none starts there.
size_t utf8_length(const unsigned char* p, size_t left) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned low = 0x80, high = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    need = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 3;
    if (c == 0xe0) low = 0xa0;   // no overlong forms
    if (c == 0xed) high = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 4;
    if (c == 0xf0) low = 0x90;
    if (c == 0xf4) high = 0x8f;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (left < need || p[1] < low || p[1] > high) return 0;
  for (size_t k = 2; k < need; ++k) {
    if (p[k] < 0x80 || p[k] > 0xbf) return 0;
  }
  return need;
}

// The 1-based column of byte `at` of a line, in characters (one byte of an invalid sequence is one character).
int64_t column_of(std::string_view line, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  int64_t column = 1;
  for (size_t i = 0; i < at; ++column) {
    const size_t n = utf8_length(p + i, line.size() - i);
    i += n == 0 ? 1 : n;
  }
  return column;
}

// Positions of the tabs of a line: at most `most` of them are recorded, all are counted.
struct Tabs {
  size_t at[3] = {0, 0, 0};
  size_t count = 0;
};

Tabs find_tabs(std::string_view text) {
  Tabs tabs;
  const char* p = text.data();
  const char* e = p + text.size();
  while (p < e) {
    const char* t = static_cast<const char*>(std::memchr(p, '\t', static_cast<size_t>(e - p)));
    if (t == nullptr) break;
    if (tabs.count < 3) tabs.at[tabs.count] = static_cast<size_t>(t - text.data());
    ++tabs.count;
    p = t + 1;
  }
  return tabs;
}

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

enum class LabelParse { ok, invalid, too_large };

// A class id as strtoull reads it, but the whole field: optional leading whitespace and '+', ASCII digits,
// optional trailing spaces and '\r'. `digits` gets the digits (for messages).
LabelParse parse_label(std::string_view field, uint64_t& value, std::string_view& digits) {
  size_t i = 0;
  const size_t n = field.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n'; };
  while (i < n && space(field[i])) ++i;
  if (i < n && field[i] == '+') ++i;
  const size_t first = i;
  bool overflow = false;
  value = 0;
  for (; i < n && is_digit(field[i]); ++i) {
    const uint64_t d = static_cast<uint64_t>(field[i] - '0');
    if (value > (UINT64_MAX - d) / 10) overflow = true;
    value = value * 10 + d;
  }
  digits = field.substr(first, i - first);
  if (i == first) return LabelParse::invalid;
  while (i < n && (field[i] == ' ' || field[i] == '\r')) ++i;
  if (i != n) return LabelParse::invalid;
  return overflow ? LabelParse::too_large : LabelParse::ok;
}

// A key of 1-20 ASCII digits that fits in 64 bits.
bool numeric_key(std::string_view key, uint64_t& value) {
  if (key.empty() || key.size() > 20) return false;
  value = 0;
  for (const char c : key) {
    if (!is_digit(c)) return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - d) / 10) return false;
    value = value * 10 + d;
  }
  return true;
}

template <class T>
void trim(std::vector<T>& column) {
  if (column.capacity() - column.size() > column.size() / 8 + 64) column.shrink_to_fit();
}

// Sets `fatal` (the line is the whole line, for the column) and returns false.
struct Failer {
  Fatal& fatal;

  bool operator()(std::string message, std::string_view line, int64_t offset, int64_t line_number, size_t at) const {
    fatal.message = std::move(message);
    fatal.offset = offset + static_cast<int64_t>(at);
    fatal.line = line_number;
    fatal.column = column_of(line, at);
    return false;
  }

  bool with(std::string message, std::string_view detail, std::string_view line, int64_t offset, int64_t line_number,
            size_t at) const {
    fatal.detail.assign(detail.data(), detail.size());
    fatal.has_detail = true;
    return (*this)(std::move(message), line, offset, line_number, at);
  }

  void key(std::string_view text) const {
    fatal.key.assign(text.data(), text.size());
    fatal.has_key = true;
  }
};

// The label field at `at` of a line: checks it and gives the class id, or -1 when labels are not parsed.
// `what` names the sequence in the out-of-range message ("" or " of image {}" with `detail`).
bool read_label(std::string_view field, int64_t label_dim, const Failer& fail, std::string_view line, int64_t offset,
                int64_t line_number, size_t at, std::string_view what, std::string_view detail, int64_t& label) {
  label = -1;
  if (label_dim < 0) return true;
  uint64_t value = 0;
  std::string_view digits;
  const LabelParse parsed = parse_label(field, value, digits);
  if (parsed == LabelParse::invalid)
    return fail.with("label {} is not an unsigned decimal integer", field, line, offset, line_number, at);
  if (parsed == LabelParse::too_large || value >= static_cast<uint64_t>(label_dim)) {
    std::string message = "class id " + std::string(digits) + std::string(what) + " is not below label_dim " +
                          std::to_string(label_dim);
    if (what.find("{}") != std::string_view::npos) return fail.with(std::move(message), detail, line, offset, line_number, at);
    return fail(std::move(message), line, offset, line_number, at);
  }
  label = static_cast<int64_t>(value);
  return true;
}

std::string columns_message(size_t found, int expected) {
  const std::string count = std::to_string(found);
  if (expected == 0)
    return "expected 2 tab-separated columns (path, label) or 3 (key, path, label), found " + count;
  if (expected == 2) return "expected 2 tab-separated columns (path, label) as on the first line, found " + count;
  return "expected 3 tab-separated columns (key, path, label) as on the first line, found " + count;
}

// `text` with a leading "..." replaced by `directory` (into `out`), or `text` itself.
std::string_view expand_dots(std::string_view text, std::string_view directory, std::string& out) {
  if (text.substr(0, kDots.size()) != kDots) return text;
  out.assign(directory.data(), directory.size());
  out.append(text.substr(kDots.size()));
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ image map

bool scan_map(int fd, int64_t size, const MapOptions& options, MapResult& r, Fatal& fatal) {
  const Failer fail{fatal};
  Interner paths(r.path_blob, r.path_offsets);
  Interner containers(r.container_blob, r.container_offsets);
  std::string expanded, item;
  auto on_line = [&](std::string_view text, int64_t offset, int64_t line) -> bool {
    if (blank(text)) return true;
    if (line > kMaxRows) return fail("more than 2^31 - 2 lines in a map file", text, offset, line, 0);
    const std::string_view whole = text;  // for columns
    if (text.back() == '\r') text.remove_suffix(1);
    const Tabs tabs = find_tabs(text);
    const size_t found = tabs.count + 1;
    if (r.columns == 0 ? (found != 2 && found != 3) : found != static_cast<size_t>(r.columns)) {
      const size_t most = r.columns == 0 ? 3 : static_cast<size_t>(r.columns);
      const size_t at = found > most ? tabs.at[most - 1] + 1 : text.size();  // the extra column, or the line's end
      if (r.columns == 3 && found >= 2) {
        fail.key(text.substr(0, tabs.at[0]));
      } else if (r.columns != 3) {
        fatal.key_index = line - 1;
      }
      return fail(columns_message(found, r.columns), whole, offset, line, at);
    }
    if (r.columns == 0) r.columns = static_cast<int>(found);
    size_t path_at = 0;
    std::string_view path, label_field;
    if (found == 3) {
      const std::string_view key = text.substr(0, tabs.at[0]);
      fail.key(key);
      if (key.empty()) return fail("empty sequence key", whole, offset, line, 0);
      path_at = tabs.at[0] + 1;
      path = text.substr(path_at, tabs.at[1] - path_at);
    } else {
      fatal.key_index = line - 1;
      path = text.substr(0, tabs.at[0]);
    }
    const size_t label_at = tabs.at[found - 2] + 1;
    label_field = text.substr(label_at);
    if (path.empty()) return fail("empty image path", whole, offset, line, path_at);
    if (label_field.empty()) return fail("empty label", whole, offset, line, label_at);
    int64_t label = -1;
    if (!read_label(label_field, options.label_dim, fail, whole, offset, line, label_at, " of image {}", path, label))
      return false;

    int32_t container = -1, path_id = -1;
    const size_t at = path.find('@');
    if (at == std::string_view::npos) {
      path_id = paths.intern(expand_dots(path, options.directory, expanded));
    } else {
      const std::string_view archive = path.substr(0, at);
      if (archive.empty()) return fail.with("empty zip archive name before '@' in {}", path, whole, offset, line, path_at);
      if (path.size() - at <= 2)  // the item is what follows '@' and one more character
        return fail.with("empty zip item name after '@' in {}", path, whole, offset, line, path_at + at);
      item.assign(path.substr(at + 2));
      std::replace(item.begin(), item.end(), '\\', '/');
      container = containers.intern(expand_dots(archive, options.directory, expanded));
      path_id = paths.intern(item);
    }
    if (found == 3) {
      const std::string_view key = text.substr(0, tabs.at[0]);
      r.key_blob.insert(r.key_blob.end(), key.begin(), key.end());
      r.key_offsets.push_back(static_cast<int64_t>(r.key_blob.size()));
    } else {
      r.key_index.push_back(line - 1);
    }
    r.container_ids.push_back(container);
    r.path_ids.push_back(path_id);
    r.labels.push_back(label);
    r.lines.push_back(static_cast<int32_t>(line));
    r.offsets.push_back(offset);
    fatal.forget_key();
    return true;
  };
  const bool ok = for_each_line(fd, size, options.block_size, on_line);
  if (ok) fatal.forget_key();
  trim(r.key_blob);
  trim(r.key_offsets);
  trim(r.key_index);
  trim(r.path_blob);
  trim(r.path_offsets);
  trim(r.path_ids);
  trim(r.container_ids);
  trim(r.labels);
  trim(r.lines);
  trim(r.offsets);
  return ok;
}

// ------------------------------------------------------------------------------------------------ base64 file

bool scan_base64(int fd, int64_t size, const Base64Options& options, Base64Result& r, Fatal& fatal) {
  const Failer fail{fatal};
  int fields = 0;  // 2 or 3, from the first line
  r.numeric_keys = true;
  auto on_line = [&](std::string_view text, int64_t offset, int64_t line) -> bool {
    if (blank(text)) return true;
    if (line > kMaxRows) return fail("more than 2^31 - 2 lines in a base64 image file", text, offset, line, 0);
    const Tabs tabs = find_tabs(text);
    const size_t found = tabs.count + 1;
    const bool keyed = fields == 3 || (fields == 0 && found == 3);
    if (keyed && found >= 2) {
      fail.key(text.substr(0, tabs.at[0]));
    } else if (!keyed) {
      fatal.key_index = line - 1;
    }
    if (fields == 0 ? (found != 2 && found != 3) : found != static_cast<size_t>(fields)) {
      const size_t most = fields == 0 ? 3 : static_cast<size_t>(fields);
      const size_t at = found > most ? tabs.at[most - 1] + 1 : text.size();  // the extra field, or the line's end
      const char* expected =
          fields == 0 ? "expected 2 tab-separated fields (label, base64 data) or 3 (key, label, base64 data), found "
          : fields == 2 ? "expected 2 tab-separated fields (label, base64 data) as on the first line, found "
                        : "expected 3 tab-separated fields (key, label, base64 data) as on the first line, found ";
      return fail(expected + std::to_string(found), text, offset, line, at);
    }
    if (fields == 0) {
      fields = static_cast<int>(found);
      r.has_keys = fields == 3;
    }
    size_t label_at = 0;
    if (keyed) {
      const std::string_view key = text.substr(0, tabs.at[0]);
      if (key.empty()) return fail("empty sequence key", text, offset, line, 0);
      label_at = tabs.at[0] + 1;
    }
    const size_t payload_at = tabs.at[found - 2] + 1;
    const std::string_view label_field = text.substr(label_at, payload_at - 1 - label_at);
    if (label_field.empty()) return fail("empty label", text, offset, line, label_at);
    int64_t label = -1;
    if (!read_label(label_field, options.label_dim, fail, text, offset, line, label_at, "", {}, label)) return false;
    if (keyed) {
      const std::string_view key = text.substr(0, tabs.at[0]);
      uint64_t value = 0;
      if (r.numeric_keys && !numeric_key(key, value)) {
        r.numeric_keys = false;
        std::vector<uint64_t>().swap(r.key_values);
      }
      if (r.numeric_keys) r.key_values.push_back(value);
      r.key_blob.insert(r.key_blob.end(), key.begin(), key.end());
      r.key_offsets.push_back(static_cast<int64_t>(r.key_blob.size()));
    } else {
      r.key_values.push_back(static_cast<uint64_t>(line - 1));
    }
    r.labels.push_back(label);
    r.payload_offsets.push_back(offset + static_cast<int64_t>(payload_at));
    r.payload_lengths.push_back(static_cast<int64_t>(text.size() - payload_at));
    r.lines.push_back(static_cast<int32_t>(line));
    r.offsets.push_back(offset);
    fatal.forget_key();
    return true;
  };
  if (!for_each_line(fd, size, options.block_size, on_line)) return false;
  fatal.forget_key();
  if (r.has_keys) {  // two consecutive lines with one key would be one sequence of several images
    const size_t n = r.lines.size();
    auto key_text = [&](size_t i) {
      const int64_t b = r.key_offsets[i], e = r.key_offsets[i + 1];
      return std::string_view(reinterpret_cast<const char*>(r.key_blob.data()) + b, static_cast<size_t>(e - b));
    };
    for (size_t i = 1; i < n; ++i) {
      const bool same = r.numeric_keys ? r.key_values[i] == r.key_values[i - 1] : key_text(i) == key_text(i - 1);
      if (!same) continue;
      fail.key(key_text(i));
      fatal.message = "sequence key {} is also the key of the line before (line " + std::to_string(r.lines[i - 1]) +
                      "): consecutive lines with one key would make one sequence of several images";
      fatal.detail.assign(key_text(i));
      fatal.has_detail = true;
      fatal.offset = r.offsets[i];
      fatal.line = r.lines[i];
      fatal.column = 1;
      return false;
    }
    if (r.numeric_keys) {
      std::vector<uint8_t>().swap(r.key_blob);
      r.key_offsets.assign(1, 0);
    }
  } else {
    r.numeric_keys = true;
  }
  if (!r.numeric_keys) std::vector<uint64_t>().swap(r.key_values);
  trim(r.key_blob);
  trim(r.key_offsets);
  trim(r.key_values);
  trim(r.labels);
  trim(r.payload_offsets);
  trim(r.payload_lengths);
  trim(r.lines);
  trim(r.offsets);
  return true;
}

// ------------------------------------------------------------------------------------------------ base64

namespace {

// 0-63: the value of a base64 character; 64: '='; 128: anything else.
struct Base64Table {
  uint8_t value[256];
  constexpr Base64Table() : value() {
    for (int i = 0; i < 256; ++i) value[i] = 128;
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(alphabet[i])] = static_cast<uint8_t>(i);
    value[static_cast<unsigned char>('=')] = 64;
  }
};

constexpr Base64Table kBase64{};

}  // namespace

size_t base64_trim(const uint8_t* data, size_t n) {
  while (n > 0 && kBase64.value[data[n - 1]] == 128) --n;
  return n;
}

int64_t base64_decode(const uint8_t* data, size_t n, uint8_t* out) {
  if (n % 4 != 0) return -1;
  if (n == 0) return 0;
  const uint8_t* v = kBase64.value;
  uint8_t* o = out;
  const size_t full = n - 4;  // every quantum but the last has no padding
  for (size_t i = 0; i < full; i += 4) {
    const uint32_t a = v[data[i]], b = v[data[i + 1]], c = v[data[i + 2]], d = v[data[i + 3]];
    if ((a | b | c | d) >= 64) return -1;
    const uint32_t word = (a << 18) | (b << 12) | (c << 6) | d;
    o[0] = static_cast<uint8_t>(word >> 16);
    o[1] = static_cast<uint8_t>(word >> 8);
    o[2] = static_cast<uint8_t>(word);
    o += 3;
  }
  const uint32_t a = v[data[full]], b = v[data[full + 1]], c = v[data[full + 2]], d = v[data[full + 3]];
  if ((a | b) >= 64) return -1;
  if (c == 64) {  // "xy=="
    if (d != 64) return -1;
    *o++ = static_cast<uint8_t>((a << 2) | (b >> 4));
  } else if (d == 64) {  // "xyz="
    if (c >= 64) return -1;
    const uint32_t word = (a << 18) | (b << 12) | (c << 6);
    o[0] = static_cast<uint8_t>(word >> 16);
    o[1] = static_cast<uint8_t>(word >> 8);
    o += 2;
  } else {
    if ((c | d) >= 64) return -1;
    const uint32_t word = (a << 18) | (b << 12) | (c << 6) | d;
    o[0] = static_cast<uint8_t>(word >> 16);
    o[1] = static_cast<uint8_t>(word >> 8);
    o[2] = static_cast<uint8_t>(word);
    o += 3;
  }
  return o - out;
}

DecodedBatch decode_batch(int fd, const int64_t* offsets, const int64_t* lengths, size_t n) {
  DecodedBatch r;
  r.out_offsets.reserve(n + 1);
  r.ok.assign(n, 0);
  if (n == 0) return r;
  int64_t total = 0, capacity = 0;
  bool ascending = true;
  for (size_t i = 0; i < n; ++i) {
    total += lengths[i];
    capacity += lengths[i] / 4 * 3;
    if (i > 0 && offsets[i] < offsets[i - 1]) ascending = false;
  }
  int64_t first = offsets[0], last = 0;
  for (size_t i = 0; i < n; ++i) {
    first = std::min(first, offsets[i]);
    last = std::max(last, offsets[i] + lengths[i]);
  }
  // One read of the whole span when the rows are in file order with little in between (a chunk's lines).
  const int64_t span = last - first;
  const bool one_read = ascending && span <= total + std::max<int64_t>(total, int64_t{1} << 20);
  std::vector<uint8_t> raw;
  if (one_read) {
    raw.resize(static_cast<size_t>(span));
    read_exact(fd, first, span, reinterpret_cast<char*>(raw.data()));
  }
  r.blob.resize(static_cast<size_t>(capacity));
  int64_t written = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* data;
    if (one_read) {
      data = raw.data() + (offsets[i] - first);
    } else {
      raw.resize(static_cast<size_t>(lengths[i]));
      read_exact(fd, offsets[i], lengths[i], reinterpret_cast<char*>(raw.data()));
      data = raw.data();
    }
    const size_t trimmed = base64_trim(data, static_cast<size_t>(lengths[i]));
    const int64_t size = base64_decode(data, trimmed, r.blob.data() + written);
    if (size >= 0) {
      written += size;
      r.ok[i] = 1;
    }
    r.out_offsets.push_back(written);
  }
  r.blob.resize(static_cast<size_t>(written));
  if (r.blob.capacity() - r.blob.size() > r.blob.size() / 8 + 64) r.blob.shrink_to_fit();
  return r;
}

}  // namespace cntkio::image
