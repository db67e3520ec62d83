// MLF parser (see mlf.hpp): lines are found with memchr in blocks read with pread; label lines are split on
// single spaces; entries are checked as they end and either appended to the columns or listed as invalid.
#include "mlf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "block_column.hpp"
#include "file_io.hpp"
#include "number.hpp"

namespace cntkio::mlf {

namespace {


constexpr std::string_view kMagic = "#!MLF!#";
constexpr double kMaxValue = 4.0e18;  // times/frames above this cannot be frame numbers (size_t overflow)

inline bool is_trailing_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// The value of a whole token as a double: plain digits directly, anything else through CNTK's number
// grammar (correctly rounded). False when the token is not a number in full.
bool parse_double(const char* b, const char* e, double& out) {
  const size_t n = static_cast<size_t>(e - b);
  if (n > 0 && n <= 15) {
    uint64_t v = 0;
    const char* p = b;
    while (p < e && is_digit(static_cast<unsigned char>(*p))) v = v * 10 + static_cast<unsigned>(*p++ - '0');
    if (p == e) {
      out = static_cast<double>(v);
      return true;
    }
  }
  if (n == 0 || n > 4096) return false;
  std::string text(b, n);
  text.append(16, '\0');  // scan_number may look 8 bytes ahead up to its fast limit
  const char* next = nullptr;
  double value = 0;
  if (scan_number(text.data(), text.data() + n, value, &next) != NumberStatus::ok) return false;
  if (next != text.data() + n) return false;
  out = value;
  return true;
}

class Parser {
 public:
  Parser(int fd, int64_t size, const Options& options) : fd_(fd), size_(size), options_(options) {}

  ParseResult run() {
    if (!setup()) return finish();
    buffer_.resize(static_cast<size_t>(std::max<int64_t>(options_.block_size, 256)));
    int64_t pos = 0, line = 1;
    bool first = true;
    while (true) {
      const char* data = buffer_.data();
      const char* p = data + pos;
      const char* end = data + length_;
      const char* newline = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (newline == nullptr && !eof_) {
        consume(pos);
        pos = 0;
        fill();
        continue;
      }
      if (p == end) break;
      const char* line_end = newline ? newline : end;
      const char* next = newline ? newline + 1 : end;
      if (first) {  // a UTF-8 byte order mark
        first = false;
        if (line_end - p >= 3 && std::memcmp(p, "\xef\xbb\xbf", 3) == 0) p += 3;
      }
      on_line(p, line_end, base_ + (p - data), line, newline != nullptr);
      result_.lines = line;
      if (!result_.fatal.message.empty()) return finish();
      pos = next - data;
      ++line;
    }
    end_of_file(line);
    return finish();
  }

 private:
  enum class State { magic, outside, entry, skip };

  bool setup() {
    if (options_.dim <= 0) return fatal_at("the label dimension must be positive, got " + std::to_string(options_.dim), 0, 0, 0);
    if (options_.dim > 65535)
      return fatal_at("the label dimension " + std::to_string(options_.dim) + " exceeds 65535 (class ids are 16-bit)", 0, 0, 0);
    if (options_.has_states) {
      if (options_.states.empty()) return fatal_at("the state list is empty", 0, 0, 0);
      states_.reserve(options_.states.size() * 2);
      for (size_t i = 0; i < options_.states.size(); ++i) {
        const auto [it, added] = states_.emplace(std::string_view(options_.states[i]), static_cast<int64_t>(i));
        if (!added)
          return fatal_at("duplicate state name '" + options_.states[i] + "' in the state list (positions " +
                              std::to_string(it->second) + " and " + std::to_string(i) + ")",
                          0, 0, 0);
      }
    }
    return true;
  }

  void fill() {
    if (length_ == static_cast<int64_t>(buffer_.size())) buffer_.resize(buffer_.size() * 2);  // a very long line
    const int64_t want = std::min<int64_t>(static_cast<int64_t>(buffer_.size()) - length_, size_ - read_at_);
    const int64_t n = want > 0 ? read_some(fd_, read_at_, want, buffer_.data() + length_) : 0;
    length_ += n;
    read_at_ += n;
    if (n < want || read_at_ >= size_) eof_ = true;
  }

  void consume(int64_t pos) {
    if (pos > 0) {
      std::memmove(buffer_.data(), buffer_.data() + pos, static_cast<size_t>(length_ - pos));
      base_ += pos;
      length_ -= pos;
    }
  }

  bool fatal_at(std::string message, int64_t offset, int64_t line, int64_t column) {
    result_.fatal.message = std::move(message);
    result_.fatal.offset = offset;
    result_.fatal.line = line;
    result_.fatal.column = column;
    result_.fatal.key = state_ == State::entry ? key_ : std::string();
    return false;
  }

  void invalid(std::string key, int64_t line, int64_t offset, std::string reason, int64_t column = 0) {
    result_.invalid.push_back(InvalidEntry{std::move(key), line, offset, std::move(reason), column});
  }

  // `terminated`: the line ends with '\n' (false only for the last line of a file that does not end with one).
  void on_line(const char* p, const char* e, int64_t offset, int64_t line, bool terminated) {
    while (e > p && is_trailing_space(e[-1])) --e;
    if (e == p) return;
    const std::string_view text(p, static_cast<size_t>(e - p));
    bool blank = true;  // a line of whitespace only
    for (const char c : text) blank = blank && (c == ' ' || c == '\t');
    if (blank) return;
    switch (state_) {
      case State::magic:
        if (text != kMagic) {
          fatal_at("the first non-blank line must be #!MLF!#, found '" + std::string(text.substr(0, 80)) + "'", offset,
                   line, 1);
          return;
        }
        state_ = State::outside;
        return;
      case State::entry:
        if (text == ".") {
          end_entry(line);
          return;
        }
        if (text == kMagic || text.front() == '"') {  // the next entry began before this one's '.'
          invalid(key_, header_line_, header_offset_,
                  "entry not terminated by a '.' line (the next entry starts on line " + std::to_string(line) + ")");
          state_ = State::outside;
          break;  // handled below as a header
        }
        last_line_ = line;
        last_offset_ = offset;
        last_terminated_ = terminated;
        label_line(p, e, offset, line);
        if (!result_.fatal.message.empty()) {  // a bad label line makes its entry invalid, not the file unreadable
          const Fatal problem = std::move(result_.fatal);
          result_.fatal = Fatal{};
          if (!terminated) {
            // The file ends inside this label line (no end of line, no '.' after it): it was cut, so what is
            // wrong with the line is that it is incomplete.
            invalid(key_, line, offset,
                    "entry truncated: the file ends in the middle of label line " + std::to_string(line) +
                        ", which has no end of line and is incomplete (" + problem.message +
                        "); the entry starts on line " + std::to_string(header_line_) + " and has no '.' line");
            state_ = State::outside;
          } else if (!bad_) {
            bad_ = true;
            bad_line_ = line;
            bad_offset_ = problem.offset;
            bad_column_ = problem.column;
            bad_reason_ = problem.message;
          }
        }
        return;
      case State::skip:
        if (text == ".") {
          state_ = State::outside;
          return;
        }
        if (text == kMagic || text.front() == '"') {
          state_ = State::outside;
          break;
        }
        return;
      case State::outside:
        break;
    }
    header(text, offset, line, terminated);
  }

  void header(std::string_view text, int64_t offset, int64_t line, bool terminated) {
    if (text == kMagic) return;  // concatenated MLFs
    if (text == ".") {
      invalid("", line, offset, "a '.' line outside an entry");
      return;
    }
    if (text.size() <= 2 || text.front() != '"' || text.back() != '"') {
      std::string reason =
          !terminated && text.front() == '"'
              ? "entry header cut by the end of the file (no closing quote and no end of line)"
              : text.size() <= 2 && text.front() == '"' ? "entry header too short (an empty quoted name)"
                                                        : "entry header is not a quoted name; the entry is skipped";
      invalid(std::string(text), line, offset, std::move(reason));
      state_ = State::skip;
      return;
    }
    std::string_view name = text.substr(1, text.size() - 2);
    if (name.size() >= 2 && name[0] == '*' && name[1] == '/') name.remove_prefix(2);
    const size_t dot = name.rfind('.');
    if (dot != std::string_view::npos) name = name.substr(0, dot);
    if (name.empty()) {
      invalid(std::string(text), line, offset, "entry header gives an empty key");
      state_ = State::skip;
      return;
    }
    key_.assign(name.data(), name.size());
    header_line_ = last_line_ = line;
    header_offset_ = last_offset_ = offset;
    last_terminated_ = terminated;
    state_ = State::entry;
    bad_ = false;
    bad_line_ = bad_offset_ = bad_column_ = 0;
    bad_reason_.clear();
    labels_ = 0;
    expected_ = 0;
    run_states_.clear();
    run_counts_.clear();
  }

  void label_line(const char* p, const char* e, int64_t offset, int64_t line) {
    const char* tokens[5];
    const char* token_ends[5];
    int count = 0;
    for (const char* t = p;;) {
      const char* space = static_cast<const char*>(std::memchr(t, ' ', static_cast<size_t>(e - t)));
      const char* stop = space ? space : e;
      if (stop == t) {
        fatal_at("empty column (two spaces in a row, or a leading space) in a label line", offset, line, (t - p) + 1);
        return;
      }
      if (count < 5) {
        tokens[count] = t;
        token_ends[count] = stop;
      }
      ++count;
      if (!space) break;
      t = space + 1;
    }
    auto column = [&](int k) { return static_cast<int64_t>(tokens[k] - p) + 1; };
    if (count < 3) {
      fatal_at("a label line needs the columns: start end name" + std::string(options_.has_states ? "" : " class_id") +
                   " (found " + std::to_string(count) + ")",
               offset, line, 1);
      return;
    }
    if (!options_.has_states && count != 4) {
      fatal_at("without a state list a label line must have exactly 4 columns (start end name class_id), found " +
                   std::to_string(count),
               offset, line, count > 4 ? column(4) : 1);
      return;
    }
    double start = 0, end = 0;
    for (int k = 0; k < 2; ++k) {
      double& v = k == 0 ? start : end;
      if (!parse_double(tokens[k], token_ends[k], v)) {
        fatal_at(std::string(k == 0 ? "start" : "end") + " time '" +
                     std::string(tokens[k], std::min<size_t>(static_cast<size_t>(token_ends[k] - tokens[k]), 80)) +
                     "' is not a number",
                 offset, line, column(k));
        return;
      }
      if (!(v >= 0) || !(v <= kMaxValue)) {
        fatal_at(std::string(k == 0 ? "start" : "end") + " time " +
                     std::string(tokens[k], std::min<size_t>(static_cast<size_t>(token_ends[k] - tokens[k]), 80)) +
                     " is negative or too large",
                 offset, line, column(k));
        return;
      }
    }
    if (end < start) {
      fatal_at("end time " + std::string(tokens[1], token_ends[1]) + " is before start time " +
                   std::string(tokens[0], token_ends[0]),
               offset, line, column(1));
      return;
    }
    uint64_t first = 0, last = 0;
    if (end - start >= 99999) {  // HTK 100 ns units, rounded to frames (CNTK's rule, decided per line)
      first = static_cast<uint64_t>(start / 100000 + 0.5);
      last = static_cast<uint64_t>(end / 100000 + 0.5);
    } else {  // frame indices
      first = static_cast<uint64_t>(start);
      last = static_cast<uint64_t>(end);
    }
    int64_t id = 0;
    if (options_.has_states) {
      const std::string_view name(tokens[2], static_cast<size_t>(token_ends[2] - tokens[2]));
      const auto it = states_.find(name);
      if (it == states_.end()) {
        fatal_at("state '" + std::string(name.substr(0, 80)) + "' is not in the state list", offset, line, column(2));
        return;
      }
      id = it->second;
    } else {
      const char* q = tokens[3];
      uint64_t v = 0;
      for (; q < token_ends[3] && is_digit(static_cast<unsigned char>(*q)) && v < (uint64_t{1} << 40); ++q) v = v * 10 + (*q - '0');
      if (q != token_ends[3]) {
        fatal_at("class id '" + std::string(tokens[3], std::min<size_t>(static_cast<size_t>(token_ends[3] - tokens[3]), 80)) +
                     "' is not a non-negative integer",
                 offset, line, column(3));
        return;
      }
      id = static_cast<int64_t>(v);
    }
    if (id >= options_.dim) {
      fatal_at("class id " + std::to_string(id) + " exceeds the model output dimension " + std::to_string(options_.dim),
               offset, line, column(options_.has_states ? 2 : 3));
      return;
    }
    if (last - first > UINT32_MAX) {
      fatal_at("a label segment of " + std::to_string(last - first) + " frames (at most 2^32-1)", offset, line, 1);
      return;
    }
    ++labels_;
    if (!bad_ && first != expected_) {
      bad_ = true;
      bad_line_ = line;
      bad_offset_ = offset;
      bad_column_ = 0;
      bad_reason_ = labels_ == 1 ? "the first label range starts at frame " + std::to_string(first) + ", not 0"
                                 : "label ranges are not contiguous: a range starts at frame " + std::to_string(first) +
                                       " but the previous one ended at frame " + std::to_string(expected_);
    }
    expected_ = last;
    if (!bad_ && last > first) {
      run_states_.push_back(static_cast<uint16_t>(id));
      run_counts_.push_back(static_cast<uint32_t>(last - first));
    }
  }

  void end_entry(int64_t line) {
    state_ = State::outside;
    if (bad_) {
      invalid(key_, bad_line_, bad_offset_, bad_reason_, bad_column_);
      return;
    }
    if (labels_ == 0) {
      invalid(key_, header_line_, header_offset_, "entry has no label lines (ends on line " + std::to_string(line) + ")");
      return;
    }
    if (expected_ == 0) {  // every label line is empty (e.g. `0 0 s1`): a sequence needs a frame
      invalid(key_, header_line_, header_offset_,
              "every label line is empty (0 frames; the entry ends on line " + std::to_string(line) + ")");
      return;
    }
    result_.key_blob.append(key_);
    key_offsets_.push_back(static_cast<int64_t>(result_.key_blob.size()));
    for (size_t i = 0; i < run_states_.size(); ++i) {
      states_col_.push_back(run_states_[i]);
      counts_col_.push_back(run_counts_[i]);
    }
    run_offsets_.push_back(static_cast<int64_t>(states_col_.size()));
    lengths_.push_back(static_cast<int64_t>(expected_));
  }

  void end_of_file(int64_t line) {
    if (state_ == State::magic) {
      fatal_at("no #!MLF!# line: the file is empty or blank", size_, line, 1);
    } else if (state_ == State::entry) {  // reported on the entry's last line, where the file was cut
      invalid(key_, last_line_, last_offset_,
              last_line_ == header_line_
                  ? "entry truncated: the file ends right after its header, before any label line and its '.' line"
                  : "entry truncated: the file ends " +
                        std::string(last_terminated_ ? "after" : "in (or right after) the unterminated") + " label line " +
                        std::to_string(last_line_) + ", before the entry's '.' line (the entry starts on line " +
                        std::to_string(header_line_) + ")");
    }
  }

  ParseResult finish() {
    std::vector<int64_t> tail;
    key_offsets_.take_into(tail);
    result_.key_offsets.insert(result_.key_offsets.end(), tail.begin(), tail.end());
    tail.clear();
    run_offsets_.take_into(tail);
    result_.run_offsets.insert(result_.run_offsets.end(), tail.begin(), tail.end());
    std::vector<int64_t>().swap(tail);
    lengths_.take_into(result_.lengths);
    states_col_.take_into(result_.run_states);
    counts_col_.take_into(result_.run_counts);
    result_.key_blob.shrink_to_fit();
    return std::move(result_);
  }

  int fd_;
  int64_t size_;
  const Options& options_;
  std::unordered_map<std::string_view, int64_t> states_;
  std::vector<char> buffer_;
  int64_t base_ = 0, length_ = 0, read_at_ = 0;
  bool eof_ = false;

  State state_ = State::magic;
  std::string key_;
  int64_t header_line_ = 0, header_offset_ = 0, last_line_ = 0, last_offset_ = 0, labels_ = 0, bad_line_ = 0,
          bad_offset_ = 0, bad_column_ = 0;
  uint64_t expected_ = 0;
  bool bad_ = false, last_terminated_ = true;
  std::string bad_reason_;
  std::vector<uint16_t> run_states_;
  std::vector<uint32_t> run_counts_;

  BlockColumn<int64_t> key_offsets_, run_offsets_, lengths_;
  BlockColumn<uint16_t> states_col_;
  BlockColumn<uint32_t> counts_col_;
  ParseResult result_;
};

}  // namespace

ParseResult parse_file(int fd, int64_t size, const Options& options) {
  Parser parser(fd, size, options);
  return parser.run();
}

}  // namespace cntkio::mlf
