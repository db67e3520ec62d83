// CTF indexer: one pass over the file that finds sequences, their keys and sample counts.
#include <algorithm>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ctf.hpp"

namespace cntkio::ctf {

namespace {

struct OpenSequence {
  int64_t offset = -1;
  uint64_t key = 0;
  int32_t key_length = 0;
  int64_t first_line = 0;
  int64_t lines = 0;
};

class Indexer {
 public:
  Indexer(const char* data, const IndexOptions& options)
      : data_(data), options_(options), counts_(options.aliases.size(), 0),
        seen_on_line_(options.aliases.size(), -1) {}

  IndexResult run(int64_t begin, int64_t size, int64_t first_line) {
    const char* end = data_ + size;
    const char* p = data_ + begin;
    int64_t line = first_line;
    const char* released = data_;
    while (p < end) {
      const char* newline = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      const char* line_end = newline ? newline : end;
      const char* next = newline ? newline + 1 : end;
      if (!on_line(p, line_end, next, line)) return std::move(result_);
      p = next;
      ++line;
      if (options_.release_mapped_pages && p - released >= kReleaseEvery) released = release(released, p);
    }
    if (open_.offset >= 0) finish(size);
    result_.total_lines = line - first_line;
    return std::move(result_);
  }

 private:
  // Handles one physical line [p, line_end); returns false on a fatal error.
  bool on_line(const char* p, const char* line_end, const char* next, int64_t line) {
    const int64_t offset = p - data_;
    const char* body = p;
    bool has_id = false;
    uint64_t key = 0;
    int32_t key_length = 0;
    if (options_.mode == IdMode::numeric) {
      while (body < line_end && is_digit(static_cast<unsigned char>(*body))) {
        const uint64_t digit = static_cast<uint64_t>(*body - '0');
        if (key > (UINT64_MAX - digit) / 10) {
          result_.fatal = "sequence id does not fit in an unsigned 64-bit integer";
          result_.fatal_offset = offset;
          return false;
        }
        key = key * 10 + digit;
        ++body;
      }
      has_id = body != p;
    } else if (options_.mode == IdMode::text) {
      while (body < line_end && !is_space(static_cast<unsigned char>(*body)) && *body != '|') ++body;
      has_id = body != p;
      key_length = static_cast<int32_t>(body - p);
    } else {
      while (body < line_end && is_digit(static_cast<unsigned char>(*body))) ++body;
    }

    const bool has_content = scan_streams(body, line_end, line);

    if (options_.mode == IdMode::line) {
      const bool keep = options_.defining_stream >= 0
                            ? seen_on_line_[options_.defining_stream] == line
                            : (has_content || options_.keep_empty_lines);
      if (!keep) {
        ++result_.dropped_lines;
        return true;
      }
      open_ = OpenSequence{offset, static_cast<uint64_t>(line), 0, line, 1};
      add_line_counts(line);
      finish(next - data_);
      return true;
    }

    if (has_id && (open_.offset < 0 || !same_key(key, p, key_length))) {
      if (open_.offset >= 0) finish(offset);
      open_ = OpenSequence{offset, key, key_length, line, 0};
    }
    if (open_.offset < 0) return true;  // cannot happen: the first line carries an id
    ++open_.lines;
    add_line_counts(line);
    return true;
  }

  bool same_key(uint64_t key, const char* p, int32_t key_length) const {
    if (options_.mode == IdMode::numeric) return key == open_.key;
    return key_length == open_.key_length &&
           std::memcmp(p, data_ + open_.offset, static_cast<size_t>(key_length)) == 0;
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
    if (d >= 0 && length == 0) {
      ++result_.dropped_sequences;
    } else {
      const int64_t index = static_cast<int64_t>(result_.offsets.size());
      uint8_t valid = 1;
      if (options_.require_all_inputs) {
        for (size_t i = 0; i < counts_.size(); ++i) {
          if (counts_[i] == 0) {
            result_.errors.push_back({open_.offset, kMissingInput, static_cast<int32_t>(i), index});
            valid = 0;
          }
        }
      }
      if (length == 0 && valid) {
        result_.errors.push_back({open_.offset, kMissingInput, -1, index});
        valid = 0;
      }
      result_.offsets.push_back(open_.offset);
      result_.ends.push_back(end_offset);
      result_.lengths.push_back(std::max<int64_t>(length, 1));
      result_.first_lines.push_back(open_.first_line);
      result_.keys.push_back(open_.key);
      result_.key_lengths.push_back(open_.key_length);
      result_.valid.push_back(valid);
    }
    std::fill(counts_.begin(), counts_.end(), 0);
    open_ = OpenSequence{};
  }

  // Drops the pages of a file mapping already scanned from this process (the page cache keeps
  // them), so indexing a file larger than memory does not grow the resident set.
  const char* release(const char* from, const char* to) {
    const uintptr_t page = 4096;
    const uintptr_t first = reinterpret_cast<uintptr_t>(from) & ~(page - 1);
    const uintptr_t last = reinterpret_cast<uintptr_t>(to) & ~(page - 1);
#ifdef MADV_DONTNEED
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
#endif
    return reinterpret_cast<const char*>(last);
  }

  static constexpr int64_t kReleaseEvery = int64_t{64} << 20;
  const char* data_;
  const IndexOptions& options_;
  std::vector<int64_t> counts_;        // lines of the open sequence that hold each stream
  std::vector<int64_t> seen_on_line_;  // last line on which each stream was seen
  OpenSequence open_;
  IndexResult result_;
};

}  // namespace

IndexResult build_index(const char* data, int64_t begin, int64_t size, int64_t first_line,
                        const IndexOptions& options) {
  return Indexer(data, options).run(begin, size, first_line);
}

std::vector<int64_t> chunk_starts(const int64_t* offsets, const int64_t* ends, int64_t n, int64_t limit) {
  // As in CNTK, a sequence's size runs to the start of the next one, so bytes of skipped lines count.
  std::vector<int64_t> starts;
  int64_t chunk_offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t size = (i + 1 < n ? offsets[i + 1] : ends[i]) - offsets[i];
    if (starts.empty() || (offsets[i] - chunk_offset) + size > limit) {
      starts.push_back(i);
      chunk_offset = offsets[i];
    }
  }
  return starts;
}

}  // namespace cntkio::ctf
