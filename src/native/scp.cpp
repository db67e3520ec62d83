// SCP parser (see scp.hpp): lines are found with memchr in blocks read with pread; each entry is split on its
// first '=' and the first '[' after it. Physical paths get ids from an open-addressing hash table as they come;
// keys are counted at the end, partition by partition (see drop_duplicates), and every entry of a key seen more
// than once is dropped.
#include "scp.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "line_reader.hpp"
#include "text_intern.hpp"

namespace cntkio::scp {

namespace {

constexpr int64_t kMaxRows = INT32_MAX - 1;  // entries, lines and paths are int32 columns
constexpr std::string_view kDots = "...";
constexpr size_t kPartitionRows = 4096;  // entries per partition when duplicate keys are looked for

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The bytes of one valid UTF-8 character at [p, e) (strict: no overlong forms, surrogates or values past
// U+10FFFF), or 0 when none starts there.
size_t utf8_char(const unsigned char* p, const unsigned char* e) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k, unsigned low = 0x80, unsigned high = 0xbf) {
    return p + k < e && p[k] >= low && p[k] <= high;
  };
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const unsigned low = c == 0xe0 ? 0xa0 : 0x80, high = c == 0xed ? 0x9f : 0xbf;
    return cont(1, low, high) && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const unsigned low = c == 0xf0 ? 0x90 : 0x80, high = c == 0xf4 ? 0x8f : 0xbf;
    return cont(1, low, high) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// The 1-based column of byte `at` of a line: characters before it + 1, where a valid UTF-8 character, or
// one byte of an invalid sequence, is one character (as Python counts text decoded with surrogateescape).
int64_t column_of(std::string_view line, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const auto* e = p + at;
  int64_t column = 1;
  while (p < e) {
    const size_t n = utf8_char(p, e);
    p += n == 0 ? 1 : n;
    ++column;
  }
  return column;
}

// Whether the line holds only whitespace characters (Unicode White_Space as Python's str.isspace sees it:
// ASCII \t \n \v \f \r, \x1c-\x1f and space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000).
bool all_whitespace(std::string_view line) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const auto* e = p + line.size();
  while (p < e) {
    const unsigned c = p[0];
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) {
      ++p;
      continue;
    }
    const size_t left = static_cast<size_t>(e - p);
    if (c == 0xc2 && left >= 2 && (p[1] == 0x85 || p[1] == 0xa0)) {
      p += 2;
      continue;
    }
    if (left >= 3) {
      const unsigned b = p[1], d = p[2];
      const bool space = (c == 0xe1 && b == 0x9a && d == 0x80) ||
                         (c == 0xe2 && b == 0x80 && ((d >= 0x80 && d <= 0x8a) || d == 0xa8 || d == 0xa9 || d == 0xaf)) ||
                         (c == 0xe2 && b == 0x81 && d == 0x9f) || (c == 0xe3 && b == 0x80 && d == 0x80);
      if (space) {
        p += 3;
        continue;
      }
    }
    return false;
  }
  return true;
}

// Gives back a column's spare capacity when it is more than an eighth (the column is handed to NumPy as it is).
template <class T>
void trim(std::vector<T>& column) {
  if (column.capacity() - column.size() > column.size() / 8 + 64) column.shrink_to_fit();
}

// `text` with its first "..." replaced by `directory` (into `out`), or `text` itself when it has none.
std::string_view expand_dots(std::string_view text, std::string_view directory, std::string& out) {
  const size_t at = text.find(kDots);
  if (at == std::string_view::npos) return text;
  out.assign(text.data(), at);
  out.append(directory);
  out.append(text.substr(at + kDots.size()));
  return out;
}

}  // namespace

struct Parser::State {
  Options options;
  Result r;
  Fatal fatal;
  int32_t source = 0;
  bool failed = false;

  Interner paths{r.path_blob, r.path_offsets};  // remembers the previous entry's path (often the same archive)
  std::string logical_text, physical_text;  // a logical name / physical path with "..." or the prefix


  std::string_view key_of(size_t row) const {
    const auto b = r.key_offsets[row], e = r.key_offsets[row + 1];
    return {reinterpret_cast<const char*>(r.key_blob.data()) + b, static_cast<size_t>(e - b)};
  }

  bool fail(std::string message, int64_t offset, int64_t line, int64_t column) {
    fatal.message = std::move(message);
    fatal.offset = offset;
    fatal.line = line;
    fatal.column = column;
    failed = true;
    return false;
  }

  bool fail_with(std::string message, std::string_view detail, int64_t offset, int64_t line, int64_t column) {
    fatal.detail.assign(detail.data(), detail.size());
    fatal.has_detail = true;
    return fail(std::move(message), offset, line, column);
  }

  // Parses `[start,end]` at `bracket` to the end of `text` (the line without its '\r').
  bool parse_range(std::string_view text, size_t bracket, int64_t offset, int64_t line, int64_t& start, int64_t& end) {
    const size_t comma = text.find(',', bracket + 1);
    if (comma == std::string_view::npos)
      return fail("malformed path: the range has no ',' (expected [start,end])", offset + static_cast<int64_t>(bracket),
                  line, column_of(text, bracket));
    const size_t close = text.find(']', comma + 1);
    if (close == std::string_view::npos)
      return fail("malformed path: the range has no ']'", offset + static_cast<int64_t>(text.size()), line,
                  column_of(text, text.size()));
    if (close != text.size() - 1)
      return fail_with("malformed path: unexpected {} after ']'", text.substr(close + 1),
                       offset + static_cast<int64_t>(close + 1), line, column_of(text, close + 1));
    const std::string_view start_text = text.substr(bracket + 1, comma - bracket - 1);
    const std::string_view end_text = text.substr(comma + 1, close - comma - 1);
    auto number = [](std::string_view digits, int64_t& value) {
      if (digits.empty() || digits.size() > 18) return false;
      value = 0;
      for (const char c : digits) {
        if (!is_digit(c)) return false;
        value = value * 10 + (c - '0');
      }
      return true;
    };
    if (!number(start_text, start))
      return fail_with("malformed path: range start {} is not a frame index", start_text,
                       offset + static_cast<int64_t>(bracket + 1), line, column_of(text, bracket + 1));
    if (!number(end_text, end))
      return fail_with("malformed path: range end {} is not a frame index", end_text,
                       offset + static_cast<int64_t>(comma + 1), line, column_of(text, comma + 1));
    return true;
  }

  // One line (without its '\n'), starting at byte `offset` of the file.
  bool on_line(std::string_view text, int64_t offset, int64_t line, std::string_view directory) {
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.empty()) return true;
    if ((text[0] == ' ' || text[0] == '\t') && all_whitespace(text)) return true;
    if (line > kMaxRows) return fail("more than 2^31 - 2 lines in an SCP file", offset, line, 1);
    if (static_cast<int64_t>(r.path_ids.size()) >= kMaxRows) return fail("more than 2^31 - 2 SCP entries", offset, line, 1);

    constexpr size_t npos = std::string_view::npos;
    const size_t equals = text.find('=');
    const size_t bracket = text.find('[', equals == npos ? 0 : equals + 1);
    const size_t physical_begin = equals == npos ? 0 : equals + 1;
    std::string_view physical;
    int64_t start = -1, end = -1;
    if (bracket == npos) {
      physical = text.substr(physical_begin);
    } else {
      physical = text.substr(physical_begin, bracket - physical_begin);
      if (!parse_range(text, bracket, offset, line, start, end)) return false;
    }
    std::string_view logical = equals == npos ? physical : text.substr(0, equals);
    if (logical.empty()) return fail("malformed SCP entry: empty logical name before '='", offset, line, 1);
    if (physical.empty())
      return fail("malformed SCP entry: no physical path", offset + static_cast<int64_t>(physical_begin), line,
                  column_of(text, physical_begin));

    if (options.has_prefix) {
      physical_text.assign(options.prefix);
      physical_text.append(physical);
      physical = physical_text;
      if (equals == npos) logical = physical;  // the logical name is the physical path
    } else {
      const size_t dots = text.find(kDots);
      if (dots != npos) {
        const bool in_physical = equals == npos || dots > equals, in_logical = equals == npos || dots < equals;
        if (in_physical) physical = expand_dots(physical, directory, physical_text);
        if (in_logical) logical = equals == npos ? physical : expand_dots(logical, directory, logical_text);
      }
    }
    const size_t dot = logical.rfind('.');
    const std::string_view key = dot == npos ? logical : logical.substr(0, dot);
    add_entry(key, physical, start, end, line, offset);
    return true;
  }

  void add_entry(std::string_view key, std::string_view physical, int64_t start, int64_t end, int64_t line,
                 int64_t offset) {
    const int32_t path = paths.intern(physical);
    r.key_blob.insert(r.key_blob.end(), key.begin(), key.end());
    r.key_offsets.push_back(static_cast<int64_t>(r.key_blob.size()));
    r.path_ids.push_back(path);
    r.starts.push_back(start);
    r.ends.push_back(end);
    r.lines.push_back(static_cast<int32_t>(line));
    r.offsets.push_back(offset);
    r.source_ids.push_back(source);
  }

  bool add_file(int fd, int64_t size, std::string_view directory) {
    const bool ok = for_each_line(fd, size, options.block_size, [&](std::string_view text, int64_t offset, int64_t line) {
      return on_line(text, offset, line, directory);
    });
    if (ok) ++source;
    return ok;
  }

  // Drops every entry of a key that occurs more than once. The entries are first spread by the top bits of
  // their key's hash into partitions of a few thousand (in entry order within each), and each partition is
  // counted with a small hash table that stays in the cache: equal keys have equal hashes, so they meet in one
  // partition, and nothing is looked up at random in a table as large as the file.
  void drop_duplicates() {
    const size_t rows = r.path_ids.size();
    if (rows < 2) return;
    int bits = 0;
    while (bits < 16 && (rows >> bits) > kPartitionRows) ++bits;
    const size_t parts = size_t{1} << bits;
    const int shift = 64 - bits;
    auto part_of = [&](uint64_t h) { return bits == 0 ? size_t{0} : static_cast<size_t>(h >> shift); };
    std::vector<uint64_t> hashes(rows);
    std::vector<size_t> begin(parts + 1, 0);
    for (size_t i = 0; i < rows; ++i) {
      hashes[i] = hash_text(key_of(i));
      ++begin[part_of(hashes[i]) + 1];
    }
    for (size_t p = 0; p < parts; ++p) begin[p + 1] += begin[p];
    std::vector<uint64_t> part_hash(rows);
    std::vector<uint32_t> part_row(rows);
    {
      std::vector<size_t> at(begin.begin(), begin.end() - 1);
      for (size_t i = 0; i < rows; ++i) {
        const size_t k = at[part_of(hashes[i])]++;
        part_hash[k] = hashes[i];
        part_row[k] = static_cast<uint32_t>(i);
      }
    }
    std::vector<uint64_t>().swap(hashes);

    struct Repeated {
      uint32_t first_row, count;
    };
    std::vector<Repeated> repeated;
    std::vector<uint8_t> drop;  // per entry, once a key is repeated
    std::vector<uint32_t> table, first, count;
    for (size_t p = 0; p < parts; ++p) {
      const size_t b = begin[p], m = begin[p + 1] - b;
      size_t size = 16;
      while (size < 2 * m) size *= 2;
      table.assign(size, 0);
      first.resize(m);
      count.assign(m, 0);
      const size_t mask = size - 1;
      for (size_t j = 0; j < m; ++j) {
        const uint64_t h = part_hash[b + j];
        for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
          const uint32_t slot = table[i];
          if (slot == 0) {
            table[i] = static_cast<uint32_t>(j + 1);
            first[j] = static_cast<uint32_t>(j);
            count[j] = 1;
            break;
          }
          const uint32_t k = slot - 1;
          if (part_hash[b + k] == h && key_of(part_row[b + k]) == key_of(part_row[b + j])) {
            first[j] = k;
            ++count[k];
            break;
          }
        }
      }
      for (size_t j = 0; j < m; ++j) {
        const uint32_t k = first[j];
        if (count[k] < 2) continue;
        if (drop.empty()) drop.assign(rows, 0);
        drop[part_row[b + j]] = 1;
        if (k == j) repeated.push_back({part_row[b + j], count[k]});  // its first entry (partitions keep entry order)
      }
    }
    if (repeated.empty()) return;
    std::vector<uint64_t>().swap(part_hash);
    std::vector<uint32_t>().swap(part_row);
    std::sort(repeated.begin(), repeated.end(), [](const Repeated& x, const Repeated& y) { return x.first_row < y.first_row; });
    r.duplicate_keys = static_cast<int64_t>(repeated.size());
    for (const Repeated& e : repeated) {
      r.duplicate_entries += e.count;
      if (r.first_duplicates.size() < options.duplicates_shown) r.first_duplicates.emplace_back(key_of(e.first_row));
    }
    size_t kept = 0;
    int64_t blob_end = 0, key_begin = 0;  // key_begin: where entry i's key starts before the move
    for (size_t i = 0; i < rows; ++i) {
      const int64_t key_end = r.key_offsets[i + 1];
      if (!drop[i]) {
        std::memmove(r.key_blob.data() + blob_end, r.key_blob.data() + key_begin, static_cast<size_t>(key_end - key_begin));
        blob_end += key_end - key_begin;
        r.key_offsets[kept + 1] = blob_end;
        r.path_ids[kept] = r.path_ids[i];
        r.starts[kept] = r.starts[i];
        r.ends[kept] = r.ends[i];
        r.lines[kept] = r.lines[i];
        r.offsets[kept] = r.offsets[i];
        r.source_ids[kept] = r.source_ids[i];
        ++kept;
      }
      key_begin = key_end;
    }
    r.key_blob.resize(static_cast<size_t>(blob_end));
    r.key_offsets.resize(kept + 1);
    r.path_ids.resize(kept);
    r.starts.resize(kept);
    r.ends.resize(kept);
    r.lines.resize(kept);
    r.offsets.resize(kept);
    r.source_ids.resize(kept);
  }

  Result finish() {
    paths.clear();
    drop_duplicates();
    trim(r.key_blob);
    trim(r.key_offsets);
    trim(r.path_ids);
    trim(r.starts);
    trim(r.ends);
    trim(r.lines);
    trim(r.offsets);
    trim(r.source_ids);
    Result out = std::move(r);
    r = Result();
    source = 0;
    return out;
  }
};

Parser::Parser(Options options) : state_(std::make_unique<State>()) { state_->options = std::move(options); }

Parser::~Parser() = default;

bool Parser::add_file(int fd, int64_t size, std::string_view directory) {
  if (state_->failed) return false;
  return state_->add_file(fd, size, directory);
}

const Fatal& Parser::fatal() const { return state_->fatal; }

Result Parser::finish() { return state_->finish(); }

}  // namespace cntkio::scp
