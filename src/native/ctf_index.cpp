// CTF indexer: one streaming pass over the file (read block by block with pread) that finds sequences,
// their keys and sample counts, chunks them, and counts repeated ids.
#include <algorithm>
#include <cstring>
#include <string>

#include "ctf.hpp"
#include "block_column.hpp"
#include "file_io.hpp"
#include "structural.hpp"
#include "threads.hpp"

namespace cntkio::ctf {

namespace {

// The last `byte` in [p, p + n), or nullptr: glibc's memrchr where there is one (macOS has none).
inline const void* last_byte(const char* p, char byte, size_t n) {
#ifdef __GLIBC__
  return memrchr(p, byte, n);
#else
  while (n > 0) {
    if (p[--n] == byte) return p + n;
  }
  return nullptr;
#endif
}

struct OpenSequence {
  int64_t offset = -1;
  uint64_t key = 0;
  std::string text_key;
  int64_t first_line = 0;
  int64_t lines = 0;
};


uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

int64_t count_repeats(std::vector<uint64_t> values) {
  std::sort(values.begin(), values.end());
  int64_t repeats = 0;
  for (size_t i = 1; i < values.size(); ++i) repeats += values[i] == values[i - 1];
  return repeats;
}

// Greedy chunking under a byte budget, decided for each kept sequence once the next one starts. As in
// CNTK, a sequence's size runs to the start of the next one, so bytes of skipped lines count.
struct Chunker {
  int64_t limit = 0;
  int64_t count = 0;  // sequences added
  int64_t chunk_offset = 0, last_offset = 0, last_end = 0, last_first_line = 0;
  std::vector<int64_t>* starts = nullptr;
  std::vector<int64_t>* first_lines = nullptr;

  void add(int64_t offset, int64_t end, int64_t first_line) {
    decide(offset);
    last_offset = offset;
    last_end = end;
    last_first_line = first_line;
    ++count;
  }
  void close() { decide(-1); }

 private:
  void decide(int64_t next_offset) {
    if (count == 0) return;
    const int64_t size = (next_offset >= 0 ? next_offset : last_end) - last_offset;
    if (starts->empty() || (last_offset - chunk_offset) + size > limit) {
      starts->push_back(count - 1);
      first_lines->push_back(last_first_line);
      chunk_offset = last_offset;
    }
  }
};

class Indexer {
 public:
  explicit Indexer(const IndexOptions& options)
      : options_(options),
        names_(options.aliases),
        counts_(options.aliases.size(), 0),
        line_streams_((options.aliases.size() + 63) / 64, 0) {}

  // Reads the start of the file: BOM, UTF-16 check, leading whitespace, id mode. False on a fatal error.
  bool preamble(int fd, int64_t size, int64_t& begin, int64_t& first_line) {
    open_range(fd, 0, size);
    if (!fill()) return fatal("input file is empty", 0, 1, 1);
    if (length_ >= 2 && ((buffer_[0] == '\xff' && buffer_[1] == '\xfe') || (buffer_[0] == '\xfe' && buffer_[1] == '\xff')))
      return fatal("UTF-16 input is not supported (found a UTF-16 byte order mark)", 0, 1, 1);
    int64_t pos = (length_ >= 3 && std::memcmp(buffer_.data(), "\xef\xbb\xbf", 3) == 0) ? 3 : 0;
    int64_t line = 0;
    while (true) {  // leading whitespace
      while (pos < length_ && is_space(static_cast<unsigned char>(buffer_[pos]))) line += buffer_[pos++] == '\n';
      if (pos < length_) break;
      consume(pos);
      pos = 0;
      if (!fill()) return fatal("input file holds only whitespace", 0, 1, 1);
    }
    const char first = buffer_[pos];
    begin = result_.begin = base_ + pos;
    first_line = line;
    result_.mode = options_.force_line_mode || first == '|' ? IdMode::line
                   : is_digit(static_cast<unsigned char>(first)) ? IdMode::numeric
                                                                  : IdMode::text;
    return true;
  }

  // Indexes the lines of [from, to), the first being line `first_line`. With `chunking` off the first line
  // of every sequence is kept instead (the part after a split; chunks are decided when parts are merged).
  bool scan(int fd, int64_t from, int64_t to, int64_t first_line, IdMode mode, bool chunking) {
    open_range(fd, from, to);
    result_.mode = mode;
    chunking_ = chunking;
    chunker_.limit = options_.chunk_size;
    chunker_.starts = &result_.chunk_starts;
    chunker_.first_lines = &result_.chunk_first_lines;
    int64_t pos = 0, line = first_line;
    while (true) {  // the complete lines in the buffer, then more of the file behind them
      const char* data = buffer_.data();
      int64_t stop = length_;
      if (!eof_) {
        const void* last_newline = last_byte(data + pos, '\n', static_cast<size_t>(length_ - pos));
        stop = last_newline != nullptr ? static_cast<const char*>(last_newline) - data + 1 : pos;
      }
      if (stop > pos && !scan_lines(data + pos, data + stop, line)) return false;
      pos = stop;
      if (eof_) break;
      consume(pos);
      pos = 0;
      fill();
    }
    if (open_.offset >= 0) finish(base_ + length_);
    if (!result_.fatal.empty()) return false;
    result_.total_lines = line - first_line;
    next_line = line;
    bytes_read = base_ + length_ - from;
    return true;
  }

  // Ends a whole-file index: the last chunk, the columns, repeated keys.
  IndexResult finalize() {
    chunker_.close();
    result_.offsets = offsets_.take();
    result_.ends = ends_.take();
    result_.lengths = lengths_.take();
    result_.keys = keys_.take();
    result_.chunk_starts.push_back(static_cast<int64_t>(result_.offsets.size()));
    count_repeated_keys(result_);
    result_.key_blob.shrink_to_fit();
    result_.key_offsets.shrink_to_fit();
    return std::move(result_);
  }

  IndexResult take_result() { return std::move(result_); }

  // Joins the parts after the split points (`tails`, in file order, their lines counted from 0) to this part,
  // which ends where the first begins, as if one indexer had read them all.
  IndexResult merge(std::vector<Indexer>& tails) {
    std::vector<int64_t> base_lines;  // the line number of each tail's first line
    int64_t base_line = next_line;
    for (Indexer& tail : tails) {
      if (!tail.result_.fatal.empty()) {  // the fatal error, after the errors of every part before it
        for (size_t k = 0; k < base_lines.size(); ++k) append_errors(tails[k], base_lines[k]);
        append_errors(tail, base_line);
        IndexResult failed = std::move(tail.result_);
        failed.fatal_line += base_line;
        failed.begin = result_.begin;
        failed.errors = std::move(result_.errors);
        failed.error_keys = std::move(result_.error_keys);
        return failed;
      }
      for (int64_t i = 0; i < static_cast<int64_t>(tail.offsets_.size()); ++i) {
        chunker_.add(tail.offsets_.at(i), tail.ends_.at(i), tail.first_lines_.at(i) + base_line);
      }
      base_lines.push_back(base_line);
      base_line += tail.next_line;
    }
    chunker_.close();
    size_t total = offsets_.size();
    for (const Indexer& tail : tails) total += tail.offsets_.size();
    auto same = [](auto v) { return v; };
    result_.offsets.reserve(total);
    result_.ends.reserve(total);
    result_.lengths.reserve(total);
    offsets_.drain_into(result_.offsets, same);
    ends_.drain_into(result_.ends, same);
    lengths_.drain_into(result_.lengths, same);
    if (result_.mode != IdMode::text) {
      result_.keys.reserve(total);
      keys_.drain_into(result_.keys, same);
    }
    for (size_t k = 0; k < tails.size(); ++k) {
      Indexer& tail = tails[k];
      tail.offsets_.drain_into(result_.offsets, same);
      tail.ends_.drain_into(result_.ends, same);
      tail.lengths_.drain_into(result_.lengths, same);
      if (result_.mode != IdMode::text) {
        const uint64_t key_shift = result_.mode == IdMode::line ? static_cast<uint64_t>(base_lines[k]) : 0;
        tail.keys_.drain_into(result_.keys, [key_shift](uint64_t key) { return key + key_shift; });
      } else {
        const int64_t blob = static_cast<int64_t>(result_.key_blob.size());
        result_.key_blob.insert(result_.key_blob.end(), tail.result_.key_blob.begin(), tail.result_.key_blob.end());
        for (size_t i = 1; i < tail.result_.key_offsets.size(); ++i)
          result_.key_offsets.push_back(tail.result_.key_offsets[i] + blob);
      }
      append_errors(tail, base_lines[k]);
      result_.dropped_lines += tail.result_.dropped_lines;
      result_.dropped_sequences += tail.result_.dropped_sequences;
      result_.total_lines += tail.result_.total_lines;
      bytes_read += tail.bytes_read;
    }
    result_.chunk_starts.push_back(static_cast<int64_t>(total));
    count_repeated_keys(result_);
    result_.key_blob.shrink_to_fit();
    result_.key_offsets.shrink_to_fit();
    return std::move(result_);
  }

  // Appends the tail's errors to this part's, their lines shifted by the lines of this part.
  void append_errors(const Indexer& tail, int64_t base_line) {
    for (ErrorRecord e : tail.result_.errors) {
      e.line += base_line;
      result_.errors.push_back(e);
    }
    for (const std::string& key : tail.result_.error_keys) {  // line mode: the key is the (shifted) line
      result_.error_keys.push_back(result_.mode == IdMode::line ? std::to_string(std::stoll(key) + base_line) : key);
    }
  }

  int64_t next_line = 0;  // line number after the last line scanned
  IdMode mode() const { return result_.mode; }
  int64_t bytes_read = 0;  // bytes of the range scanned

 private:
  void open_range(int fd, int64_t from, int64_t to) {
    fd_ = fd;
    base_ = from;
    size_ = to;
    length_ = 0;
    eof_ = false;
    if (buffer_.empty()) {  // a block, or the whole range when it is smaller (a small file costs no large buffer)
      buffer_.resize(static_cast<size_t>(std::max<int64_t>(std::min<int64_t>(options_.block_size, to - from + 1), 4096)));
    }
  }

  // Drops buffer_[0, pos) and keeps the rest at the front.
  void consume(int64_t pos) {
    std::memmove(buffer_.data(), buffer_.data() + pos, static_cast<size_t>(length_ - pos));
    base_ += pos;
    length_ -= pos;
  }

  // Reads more of the file behind the buffered bytes (growing the buffer for a long line); false at the end.
  bool fill() {
    if (eof_) return false;
    if (length_ == static_cast<int64_t>(buffer_.size())) buffer_.resize(buffer_.size() * 2);
    const int64_t want = std::min<int64_t>(static_cast<int64_t>(buffer_.size()) - length_, size_ - (base_ + length_));
    const int64_t got = want > 0 ? read_some(fd_, base_ + length_, want, buffer_.data() + length_) : 0;
    length_ += got;
    if (got < want || base_ + length_ >= size_) eof_ = true;
    return got > 0;
  }

  bool fatal(const char* message, int64_t offset, int64_t line, int64_t column) {
    set_fatal(message, offset, line, column);
    return false;
  }

  void set_fatal(const char* message, int64_t offset, int64_t line, int64_t column) {
    result_.fatal = message;
    result_.fatal_offset = offset;
    result_.fatal_line = line;
    result_.fatal_column = column;
  }

  // Handles one physical line [p, line_end); returns false on a fatal error.
  bool on_line(const char* p, const char* line_end, const char* next, int64_t line) {
    const int64_t offset = base_ + (p - buffer_.data());
    const char* body = p;
    bool has_id = false;
    uint64_t key = 0;
    const IdMode mode = result_.mode;
    if (mode == IdMode::numeric && repeats_open_id(p, line_end)) {
      body = p + open_id_length_;
      key = open_.key;
      has_id = true;
    } else if (mode == IdMode::numeric) {
      while (body < line_end && is_digit(static_cast<unsigned char>(*body))) ++body;
      constexpr ptrdiff_t kSafeDigits = 19;  // any 19 digits fit in 64 bits: only longer ids are checked
      for (const char* d = p; d < body; ++d) {
        const uint64_t digit = static_cast<uint64_t>(*d - '0');
        if (body - p > kSafeDigits && key > (UINT64_MAX - digit) / 10) {
          set_fatal("sequence id does not fit in an unsigned 64-bit integer", offset, line + 1, 1);
          return false;
        }
        key = key * 10 + digit;
      }
      has_id = body != p;
    } else if (mode == IdMode::text) {
      while (body < line_end && !is_space(static_cast<unsigned char>(*body)) && *body != '|') ++body;
      has_id = body != p;
    }

    const bool has_content = line_has_stream_;
    line_has_stream_ = false;

    if (mode == IdMode::line) {
      const bool keep = options_.defining_stream >= 0 ? on_this_line(options_.defining_stream)
                                                      : (has_content || options_.keep_empty_lines);
      if (!keep) {
        clear_line_streams();
        ++result_.dropped_lines;
        return true;
      }
      open_.offset = offset;
      open_.key = static_cast<uint64_t>(line);
      open_.first_line = line;
      open_.lines = 1;
      add_line_counts();
      finish(base_ + (next - buffer_.data()));
      return true;
    }

    const size_t key_length = static_cast<size_t>(body - p);
    const bool same = mode == IdMode::numeric
                          ? key == open_.key
                          : open_.text_key.size() == key_length && std::memcmp(open_.text_key.data(), p, key_length) == 0;
    if (has_id && (open_.offset < 0 || !same)) {
      if (open_.offset >= 0) finish(offset);
      open_.offset = offset;
      open_.key = key;
      if (mode == IdMode::text) open_.text_key.assign(p, key_length);
      remember_open_id(p, key_length);
      open_.first_line = line;
      open_.lines = 0;
    }
    if (open_.offset < 0) {  // cannot happen: the first line carries an id
      clear_line_streams();
      return true;
    }
    ++open_.lines;
    add_line_counts();
    return true;
  }

  // Whether the line starts with the digits of the open sequence's id (of at most 7 digits: one 64-bit compare).
  bool repeats_open_id(const char* p, const char* line_end) const {
    const int64_t n = open_id_length_;
    if (n == 0 || line_end - p <= n || buffer_.data() + length_ - p < 8) return false;
    uint64_t word;
    std::memcpy(&word, p, 8);
    return (word & open_id_mask_) == open_id_word_ && !is_digit(static_cast<unsigned char>(p[n]));
  }

  void remember_open_id(const char* p, size_t length) {
    open_id_length_ = 0;
    if (result_.mode != IdMode::numeric || length > 7 || buffer_.data() + length_ - p < 8) return;
    open_id_mask_ = (uint64_t{1} << (8 * length)) - 1;
    std::memcpy(&open_id_word_, p, 8);
    open_id_word_ &= open_id_mask_;
    open_id_length_ = static_cast<int64_t>(length);
  }

  // Indexes the lines of [begin, end): complete lines, the last one cut only at the end of the range.
  bool scan_lines(const char* begin, const char* end, int64_t& line) {
    const char* line_start = begin;
    auto on_bar = [&](const char* bar) {
      mark_stream(bar + 1, end);
      return true;
    };
    auto on_newline = [&](const char* newline) {
      if (!on_line(line_start, newline, newline + 1, line) || !result_.fatal.empty()) return false;
      line_start = newline + 1;
      ++line;
      return true;
    };
    if (!for_each_structural(begin, end, on_bar, on_newline)) return false;
    if (line_start == end) return true;
    if (!on_line(line_start, end, end, line) || !result_.fatal.empty()) return false;
    ++line;
    return true;
  }

  // Marks the stream whose name starts at s (after a '|') as present on the line, if it is a configured one;
  // "|#" starts a comment, which runs to the next '|'.
  void mark_stream(const char* s, const char* limit) {
    if (s < limit && *s == '#') return;
    const int stream = names_.match(s, limit);
    if (stream >= 0) {
      line_streams_[static_cast<size_t>(stream) / 64] |= uint64_t{1} << (stream % 64);
      line_has_stream_ = true;
    }
  }

  bool on_this_line(int stream) const { return (line_streams_[static_cast<size_t>(stream) / 64] >> (stream % 64)) & 1; }

  // Counts the line for each stream on it (and forgets them for the next line).
  void add_line_counts() {
    for (size_t w = 0; w < line_streams_.size(); ++w) {
      for (uint64_t bits = line_streams_[w]; bits != 0; bits &= bits - 1) ++counts_[w * 64 + __builtin_ctzll(bits)];
      line_streams_[w] = 0;
    }
  }

  void clear_line_streams() { std::fill(line_streams_.begin(), line_streams_.end(), 0); }

  std::string key_text() const {
    return result_.mode == IdMode::text ? open_.text_key : std::to_string(open_.key);
  }

  void error(int32_t kind, int32_t stream, int64_t end_offset) {
    result_.errors.push_back({open_.offset, kind, stream, -1, open_.first_line + 1, 1, -1, open_.offset, end_offset});
    result_.error_keys.push_back(key_text());
  }

  void finish(int64_t end_offset) {
    const int d = options_.defining_stream;
    int64_t length = 0;
    if (d >= 0) {
      length = counts_[d];
    } else if (options_.count_lines) {
      length = open_.lines;
    } else {
      for (int64_t c : counts_) length = std::max(length, c);
    }
    if (length > INT32_MAX && result_.fatal.empty()) {
      set_fatal("a sequence has more than 2^31-1 samples", open_.offset, open_.first_line + 1, 1);
    }
    if (d >= 0 && length == 0) {
      ++result_.dropped_sequences;
    } else {
      bool valid = true;
      if (options_.require_all_inputs) {
        for (size_t i = 0; i < counts_.size(); ++i) {
          if (counts_[i] == 0) {
            error(kMissingInput, static_cast<int32_t>(i), end_offset);
            valid = false;
          }
        }
      }
      if (length == 0 && valid) {
        error(kMissingInput, -1, end_offset);
        valid = false;
      }
      if (valid) {
        if (chunking_) {
          chunker_.add(open_.offset, end_offset, open_.first_line);
        } else {
          first_lines_.push_back(open_.first_line);
        }
        offsets_.push_back(open_.offset);
        ends_.push_back(end_offset);
        lengths_.push_back(static_cast<int32_t>(length));
        if (result_.mode == IdMode::text) {
          result_.key_blob.insert(result_.key_blob.end(), open_.text_key.begin(), open_.text_key.end());
          result_.key_offsets.push_back(static_cast<int64_t>(result_.key_blob.size()));
        } else {
          keys_.push_back(open_.key);
        }
      }
    }
    std::fill(counts_.begin(), counts_.end(), 0);
    open_.offset = -1;
  }

  static void count_repeated_keys(IndexResult& result) {
    if (result.mode == IdMode::numeric) {
      const auto& keys = result.keys;
      bool increasing = true;
      for (size_t i = 1; i < keys.size() && increasing; ++i) increasing = keys[i - 1] < keys[i];
      if (!increasing) result.repeated_keys = count_repeats(keys);
    } else if (result.mode == IdMode::text) {
      const size_t n = result.key_offsets.size() - 1;
      std::vector<uint64_t> hashes(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t a = result.key_offsets[i], b = result.key_offsets[i + 1];
        hashes[i] = fnv1a(result.key_blob.data() + a, static_cast<size_t>(b - a));
      }
      result.repeated_keys = count_repeats(std::move(hashes));
    }
  }

  const IndexOptions& options_;
  NameMatcher names_;
  int fd_ = -1;
  int64_t size_ = 0;
  Buffer<char> buffer_;  // a mapping of its own: not zero-filled, and its pages given back when it is freed
  int64_t base_ = 0;    // file offset of buffer_[0]
  int64_t length_ = 0;  // valid bytes in buffer_
  bool eof_ = false;
  std::vector<int64_t> counts_;        // lines of the open sequence that hold each stream
  std::vector<uint64_t> line_streams_;  // bit i: stream i is on the line being scanned
  BlockColumn<int64_t> offsets_, ends_;
  BlockColumn<int32_t> lengths_;
  BlockColumn<uint64_t> keys_;
  BlockColumn<int64_t> first_lines_;  // only the part after a split keeps them (for chunking at the merge)
  Chunker chunker_;
  bool chunking_ = true;
  bool line_has_stream_ = false;  // a configured stream was seen on the line being scanned
  int64_t open_id_length_ = 0;    // the open sequence's numeric id as bytes (0: not kept)
  uint64_t open_id_word_ = 0, open_id_mask_ = 0;
  OpenSequence open_;
  IndexResult result_;
};

}  // namespace

namespace {

// A line start at or after `target` (within 4 MiB of it) where a new sequence surely starts (a line in line mode;
// in id mode a line whose id differs from the last id before it), so both sides index independently and exactly
// as one pass would. -1 when none is found.
int64_t find_split(int fd, int64_t target, int64_t size, IdMode mode) {
  Buffer<char> buffer(static_cast<size_t>(std::min<int64_t>(int64_t{4} << 20, size - target)));
  const int64_t got = read_some(fd, target, static_cast<int64_t>(buffer.size()), buffer.data());
  const char* data = buffer.data();
  const char* newline = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(got)));
  if (newline == nullptr) return -1;
  int64_t pos = newline - data + 1;
  if (mode == IdMode::line) return pos < got ? target + pos : -1;
  bool have_previous = false;
  uint64_t previous_number = 0;
  std::string previous_text;
  while (pos < got) {
    const char* line = data + pos;
    const char* end = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(got - pos)));
    if (end == nullptr) return -1;
    const char* token_end = line;
    uint64_t number = 0;
    if (mode == IdMode::numeric) {
      for (; token_end < end && is_digit(static_cast<unsigned char>(*token_end)); ++token_end) {
        const uint64_t digit = static_cast<uint64_t>(*token_end - '0');
        if (number > (UINT64_MAX - digit) / 10) return -1;  // a fatal id: let one pass report it
        number = number * 10 + digit;
      }
    } else {
      while (token_end < end && !is_space(static_cast<unsigned char>(*token_end)) && *token_end != '|') ++token_end;
    }
    if (token_end != line) {
      const bool differs = mode == IdMode::numeric
                               ? number != previous_number
                               : previous_text.compare(0, std::string::npos, line, static_cast<size_t>(token_end - line)) != 0;
      if (have_previous && differs) return target + pos;
      have_previous = true;
      previous_number = number;
      previous_text.assign(line, token_end);
    }
    pos = end - data + 1;
  }
  return -1;
}

// Split points cutting [begin, size) into up to `parts` ranges of about equal bytes (fewer where none is found).
std::vector<int64_t> find_splits(int fd, int64_t begin, int64_t size, IdMode mode, int parts) {
  std::vector<int64_t> splits;
  for (int k = 1; k < parts; ++k) {
    const int64_t target = begin + (size - begin) / parts * k;
    if (!splits.empty() && target <= splits.back()) continue;
    const int64_t split = find_split(fd, target, size, mode);
    if (split > begin && split < size && (splits.empty() || split > splits.back())) splits.push_back(split);
  }
  return splits;
}

// A failed index holds its fatal error, the counted errors before it, the id mode and the first data byte; not the
// columns, chunks and counts a pass had reached (which depend on how the file was split among threads).
IndexResult failed(IndexResult&& partial) {
  IndexResult result;
  result.mode = partial.mode;
  result.begin = partial.begin;
  result.errors = std::move(partial.errors);
  result.error_keys = std::move(partial.error_keys);
  result.fatal = std::move(partial.fatal);
  result.fatal_offset = partial.fatal_offset;
  result.fatal_line = partial.fatal_line;
  result.fatal_column = partial.fatal_column;
  return result;
}

}  // namespace

IndexResult index_file(int fd, int64_t size, const IndexOptions& options) {
  Indexer head(options);
  int64_t begin = 0, first_line = 0;
  if (!head.preamble(fd, size, begin, first_line)) return failed(head.take_result());
  const IdMode mode = head.mode();
  const int parts = static_cast<int>(std::min<int64_t>(options.threads, (size - begin) / std::max<int64_t>(options.parallel_min_bytes / 2, 1)));
  const std::vector<int64_t> splits = parts > 1 ? find_splits(fd, begin, size, mode, parts) : std::vector<int64_t>{};
  std::vector<Indexer> tails;  // reserved: an Indexer is not moved once it scans (its chunker points into it)
  tails.reserve(splits.size());
  for (size_t k = 0; k < splits.size(); ++k) tails.emplace_back(options);
  std::vector<char> ok(splits.size() + 1, 0);
  on_threads(splits.size() + 1, [&](size_t k) {
    if (k == 0) {
      ok[0] = head.scan(fd, begin, splits.empty() ? size : splits[0], first_line, mode, true);
    } else {
      const int64_t to = k < splits.size() ? splits[k] : size;
      ok[k] = tails[k - 1].scan(fd, splits[k - 1], to, 0, mode, false);
    }
  });
  if (!ok[0]) return failed(head.take_result());
  int64_t scanned = head.bytes_read;
  for (size_t k = 0; k < tails.size(); ++k) scanned += ok[k + 1] ? tails[k].bytes_read : 0;
  IndexResult result = tails.empty() ? head.finalize() : head.merge(tails);
  if (!result.fatal.empty()) return failed(std::move(result));
  if (begin + scanned != size) {
    result.fatal = "the file changed while it was indexed (its size is not what it was)";
    result.fatal_offset = begin + scanned;
    return failed(std::move(result));
  }
  return result;
}

}  // namespace cntkio::ctf
