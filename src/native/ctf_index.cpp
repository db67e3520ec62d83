// CTF indexer: one streaming pass over the file (read block by block with pread) that finds sequences,
// their keys and sample counts, chunks them, and counts repeated ids.
#include <algorithm>
#include <cstring>
#include <string>

#include "ctf.hpp"
#include "file_io.hpp"

namespace cntkio::ctf {

namespace {

struct OpenSequence {
  int64_t offset = -1;
  uint64_t key = 0;
  std::string text_key;
  int64_t first_line = 0;
  int64_t lines = 0;
};

// A growing column kept in fixed-size blocks: growth never copies, and `take()` builds the exact-size
// vector block by block, freeing each block once copied (peak: the column plus one block, never 2-3x).
template <class T>
class BlockColumn {
 public:
  void push_back(T value) {
    if (blocks_.empty() || blocks_.back().size() == kBlock) {
      blocks_.emplace_back();
      blocks_.back().reserve(kBlock);
    }
    blocks_.back().push_back(value);
    ++size_;
  }
  size_t size() const { return size_; }
  std::vector<T> take() {
    std::vector<T> result;
    result.reserve(size_);
    for (auto& block : blocks_) {
      result.insert(result.end(), block.begin(), block.end());
      std::vector<T>().swap(block);
    }
    blocks_.clear();
    size_ = 0;
    return result;
  }

 private:
  static constexpr size_t kBlock = size_t{1} << 18;
  std::vector<std::vector<T>> blocks_;
  size_t size_ = 0;
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

class Indexer {
 public:
  explicit Indexer(const IndexOptions& options)
      : options_(options), counts_(options.aliases.size(), 0), seen_on_line_(options.aliases.size(), -1) {}

  IndexResult run(int fd, int64_t size) {
    fd_ = fd;
    size_ = size;
    buffer_.resize(static_cast<size_t>(std::max<int64_t>(options_.block_size, 4096)));
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
    result_.begin = base_ + pos;
    result_.mode = options_.force_line_mode || first == '|' ? IdMode::line
                   : is_digit(static_cast<unsigned char>(first)) ? IdMode::numeric
                                                                  : IdMode::text;
    const int64_t first_line = line;
    while (true) {
      const char* data = buffer_.data();
      const char* p = data + pos;
      const char* end = data + length_;
      const char* newline = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (newline == nullptr && !eof_) {  // an unfinished line: read more
        consume(pos);
        pos = 0;
        fill();
        continue;
      }
      if (p == end) break;
      const char* line_end = newline ? newline : end;
      const char* next = newline ? newline + 1 : end;
      if (!on_line(p, line_end, next, line) || !result_.fatal.empty()) return std::move(result_);
      pos = next - data;
      ++line;
    }
    if (open_.offset >= 0) finish(base_ + length_);
    if (!result_.fatal.empty()) return std::move(result_);
    result_.total_lines = line - first_line;
    bytes_read = base_ + length_;
    close_chunk(-1);
    result_.offsets = offsets_.take();
    result_.ends = ends_.take();
    result_.lengths = lengths_.take();
    result_.keys = keys_.take();
    result_.chunk_starts.push_back(static_cast<int64_t>(result_.offsets.size()));
    count_repeated_keys();
    result_.key_blob.shrink_to_fit();
    result_.key_offsets.shrink_to_fit();
    return std::move(result_);
  }

  int64_t bytes_read = 0;

 private:
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

  IndexResult fatal(const char* message, int64_t offset, int64_t line, int64_t column) {
    set_fatal(message, offset, line, column);
    return std::move(result_);
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
    if (mode == IdMode::numeric) {
      while (body < line_end && is_digit(static_cast<unsigned char>(*body))) {
        const uint64_t digit = static_cast<uint64_t>(*body - '0');
        if (key > (UINT64_MAX - digit) / 10) {
          set_fatal("sequence id does not fit in an unsigned 64-bit integer", offset, line + 1, 1);
          return false;
        }
        key = key * 10 + digit;
        ++body;
      }
      has_id = body != p;
    } else if (mode == IdMode::text) {
      while (body < line_end && !is_space(static_cast<unsigned char>(*body)) && *body != '|') ++body;
      has_id = body != p;
    } else {
      while (body < line_end && is_digit(static_cast<unsigned char>(*body))) ++body;
    }

    const bool has_content = scan_streams(body, line_end, line);

    if (mode == IdMode::line) {
      const bool keep = options_.defining_stream >= 0 ? seen_on_line_[options_.defining_stream] == line
                                                      : (has_content || options_.keep_empty_lines);
      if (!keep) {
        ++result_.dropped_lines;
        return true;
      }
      open_.offset = offset;
      open_.key = static_cast<uint64_t>(line);
      open_.first_line = line;
      open_.lines = 1;
      add_line_counts(line);
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
      open_.first_line = line;
      open_.lines = 0;
    }
    if (open_.offset < 0) return true;  // cannot happen: the first line carries an id
    ++open_.lines;
    add_line_counts(line);
    return true;
  }

  // Marks the configured streams present on the line; returns whether any was.
  bool scan_streams(const char* s, const char* line_end, int64_t line) {
    bool any = false;
    while (s < line_end) {
      s = static_cast<const char*>(std::memchr(s, '|', static_cast<size_t>(line_end - s)));
      if (!s) break;
      ++s;
      if (s < line_end && *s == '#') continue;  // a comment runs to the next '|'
      const char* name_end = s;
      while (name_end < line_end && is_name_byte(static_cast<unsigned char>(*name_end))) ++name_end;
      const int stream = find_alias(options_.aliases, s, static_cast<size_t>(name_end - s));
      if (stream >= 0) {
        seen_on_line_[stream] = line;
        any = true;
      }
      s = name_end;
    }
    return any;
  }

  void add_line_counts(int64_t line) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += seen_on_line_[i] == line;
  }

  std::string key_text() const {
    return result_.mode == IdMode::text ? open_.text_key : std::to_string(open_.key);
  }

  void error(int32_t kind, int32_t stream) {
    result_.errors.push_back({open_.offset, kind, stream, -1, open_.first_line + 1, 1});
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
            error(kMissingInput, static_cast<int32_t>(i));
            valid = false;
          }
        }
      }
      if (length == 0 && valid) {
        error(kMissingInput, -1);
        valid = false;
      }
      if (valid) {
        close_chunk(open_.offset);
        offsets_.push_back(open_.offset);
        ends_.push_back(end_offset);
        lengths_.push_back(static_cast<int32_t>(length));
        last_offset_ = open_.offset;
        last_end_ = end_offset;
        pending_first_line_ = open_.first_line;
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

  // Greedy chunking under the byte budget, decided for the last kept sequence once the next one starts at
  // `next_offset` (-1: it was the last). As in CNTK, a sequence's size runs to the start of the next one, so
  // bytes of skipped lines count.
  void close_chunk(int64_t next_offset) {
    const size_t count = offsets_.size();
    if (count == 0) return;
    const int64_t offset = last_offset_, end = last_end_;
    const int64_t size = (next_offset >= 0 ? next_offset : end) - offset;
    if (result_.chunk_starts.empty() || (offset - chunk_offset_) + size > options_.chunk_size) {
      result_.chunk_starts.push_back(static_cast<int64_t>(count) - 1);
      result_.chunk_first_lines.push_back(pending_first_line_);
      chunk_offset_ = offset;
    }
  }

  void count_repeated_keys() {
    if (result_.mode == IdMode::numeric) {
      const auto& keys = result_.keys;
      bool increasing = true;
      for (size_t i = 1; i < keys.size() && increasing; ++i) increasing = keys[i - 1] < keys[i];
      if (!increasing) result_.repeated_keys = count_repeats(keys);
    } else if (result_.mode == IdMode::text) {
      const size_t n = result_.key_offsets.size() - 1;
      std::vector<uint64_t> hashes(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t a = result_.key_offsets[i], b = result_.key_offsets[i + 1];
        hashes[i] = fnv1a(result_.key_blob.data() + a, static_cast<size_t>(b - a));
      }
      result_.repeated_keys = count_repeats(std::move(hashes));
    }
  }

  const IndexOptions& options_;
  int fd_ = -1;
  int64_t size_ = 0;
  std::vector<char> buffer_;
  int64_t base_ = 0;    // file offset of buffer_[0]
  int64_t length_ = 0;  // valid bytes in buffer_
  bool eof_ = false;
  std::vector<int64_t> counts_;        // lines of the open sequence that hold each stream
  std::vector<int64_t> seen_on_line_;  // last line on which each stream was seen
  BlockColumn<int64_t> offsets_, ends_;
  BlockColumn<int32_t> lengths_;
  BlockColumn<uint64_t> keys_;
  int64_t last_offset_ = 0, last_end_ = 0;  // the last kept sequence (its chunk is decided at the next)
  int64_t pending_first_line_ = 0;
  int64_t chunk_offset_ = 0;
  OpenSequence open_;
  IndexResult result_;
};

}  // namespace

IndexResult index_file(int fd, int64_t size, const IndexOptions& options) {
  Indexer indexer(options);
  IndexResult result = indexer.run(fd, size);
  if (result.fatal.empty() && indexer.bytes_read != size) {
    result.fatal = "the file changed while it was indexed (its size is not what it was)";
    result.fatal_offset = indexer.bytes_read;
  }
  return result;
}

}  // namespace cntkio::ctf
