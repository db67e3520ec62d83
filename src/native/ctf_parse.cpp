// CTF parser: turns the byte ranges of sequences into flat per-stream buffers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "ctf.hpp"
#include "file_io.hpp"
#include "threads.hpp"

namespace cntkio::ctf {

namespace {

// Sorts by offset, equal offsets kept in order, in time linear in the size plus how far elements are out of place:
// errors come in file order but for a row's "no valid sample", which goes before that row's other errors, and the
// two notes at the end (a full stable sort of a million errors cost a quarter of a microsecond each).
template <class Target>
void sort_nearly_sorted(std::vector<Target>& targets) {
  auto before = [](const Target& a, const Target& b) { return a.offset < b.offset; };
  for (auto it = targets.begin(); it != targets.end(); ++it) {
    if (it == targets.begin() || !before(*it, *(it - 1))) continue;
    std::rotate(std::upper_bound(targets.begin(), it, *it, before), it, it + 1);
  }
}

// A value ends at a space, '|', or any control byte (tab, '\r', '\n', ...).
inline bool ends_value(unsigned char c) { return c == ' ' || c == '|' || c < 0x20; }
inline bool is_blank(unsigned char c) { return c == ' ' || c == '\t'; }

template <class T>
class Parser {
 public:
  Parser(const char* data, int64_t size, int64_t base, const ParseOptions& options)
      : data_(data), size_(size), fast_limit_(data + size - 8), base_(base), options_(options),
        row_mark_(options.aliases.size(), 0) {
    result_.streams.resize(options.aliases.size());
  }

  // Every row of every sequence ends with '\n' inside the buffer (the caller guarantees a final
  // '\n'), so the scanning loops below stop at it without checking bounds.
  ParseResult<T> run(const int64_t* starts, const int64_t* ends, int64_t n, int64_t first_line, const Reservation* room) {
    reserve(room != nullptr ? *room : count_rows(starts, ends, n));
    starts_ = starts;
    ends_ = ends;
    for (sequence_ = 0; sequence_ < n; ++sequence_) {
      const char* p = data_ + starts[sequence_];
      const char* end = data_ + ends[sequence_];
      while (p < end) p = row(p);
      for (auto& stream : result_.streams) stream.seq_offsets.push_back(stream.samples);
    }
    locate_errors(first_line);
    return std::move(result_);
  }

  // Fills in the 1-based line and column (and the byte) of every error and note, in one pass.
  void locate_errors(int64_t first_line) {
    struct Target {
      int64_t offset;
      int64_t* line;
      int64_t* column;
      int32_t* byte;
    };
    std::vector<Target> targets;
    for (ErrorRecord& e : result_.errors) targets.push_back({e.offset, &e.line, &e.column, &e.byte});
    ParseStats& stats = result_.stats;
    if (stats.first_padded_offset >= 0)
      targets.push_back({stats.first_padded_offset, &stats.first_padded_line, &stats.first_padded_column, nullptr});
    if (stats.first_unknown_offset >= 0)
      targets.push_back({stats.first_unknown_offset, &stats.first_unknown_line, &stats.first_unknown_column, nullptr});
    sort_nearly_sorted(targets);
    int64_t line = first_line, line_start = 0, scanned = 0;
    for (const Target& t : targets) {
      const int64_t at = std::max<int64_t>(0, std::min(t.offset - base_, size_));
      while (scanned < at) {
        const void* hit = std::memchr(data_ + scanned, '\n', static_cast<size_t>(at - scanned));
        if (!hit) {
          scanned = at;
          break;
        }
        scanned = static_cast<const char*>(hit) - data_ + 1;
        ++line;
        line_start = scanned;
      }
      *t.line = line + 1;
      *t.column = at - line_start + 1;
      if (t.byte) *t.byte = at < size_ && data_[at] != '\n' ? static_cast<unsigned char>(data_[at]) : -1;
    }
  }

 private:
  // Room for the sequences when no sample counts are known: a sample per row (rows counted).
  Reservation count_rows(const int64_t* starts, const int64_t* ends, int64_t sequences) const {
    Reservation room{1, 0, sequences};
    for (int64_t i = 0; i < sequences; ++i) {
      room.bytes += ends[i] - starts[i];
      const char* end = data_ + ends[i];
      for (const char* p = data_ + starts[i]; (p = static_cast<const char*>(std::memchr(p, '\n', end - p))); ++p) {
        ++room.samples;
      }
    }
    return room;
  }

  // Reserves the output buffers once (untouched reserved pages cost no memory), so they are neither
  // copied while growing nor faulted in 4 KiB at a time.
  void reserve(const Reservation& room) {
    const int64_t samples = std::min(room.samples, room.bytes + 1);  // a sample takes at least one byte
    for (size_t i = 0; i < result_.streams.size(); ++i) {
      StreamBuffers<T>& buffers = result_.streams[i];
      const Alias& alias = options_.aliases[i];
      buffers.seq_offsets.reserve(static_cast<size_t>(room.sequences) + 1);
      if (alias.sparse) {
        const size_t entries = static_cast<size_t>(room.bytes / 4 + 1);  // "i:v " takes at least 4 bytes
        reserve_large(buffers.values, entries);
        reserve_large(buffers.indices, entries);
        buffers.indptr.reserve(static_cast<size_t>(samples) + 1);
      } else {
        const double most = static_cast<double>(samples) * static_cast<double>(alias.dim);
        reserve_large(buffers.values, static_cast<size_t>(std::min<double>(most, static_cast<double>(room.bytes) + 1)));
      }
    }
  }

  template <class Vector>
  static void reserve_large(Vector& vector, size_t count) {
    vector.reserve(count);
#if defined(MADV_HUGEPAGE) && defined(CNTKIO_HUGEPAGES)
    constexpr uintptr_t kHuge = uintptr_t{1} << 21;
    const uintptr_t first = (reinterpret_cast<uintptr_t>(vector.data()) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t last = reinterpret_cast<uintptr_t>(vector.data() + vector.capacity()) & ~(kHuge - 1);
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
  }

  const char* row(const char* p) {
    ++row_id_;
    const char* row_start = p;
    p = skip_row_id(p, options_.mode);
    bool any_valid = false;
    bool any_failed = false;
    while (true) {
      while (is_delimiter(static_cast<unsigned char>(*p))) ++p;
      if (*p == '\n') {
        ++p;
        break;
      }
      if (*p != '|') {
        fail(kUnexpectedByte, p, -1);
        any_failed = true;
        p = skip_to_bar_or_newline(p);
        continue;
      }
      const char* bar = p++;
      if (*p == '#') {
        p = skip_to_bar_or_newline(p + 1);
        continue;
      }
      const char* name = p;
      while (is_name_byte(static_cast<unsigned char>(*p))) ++p;
      if (p == name) {
        fail(kBadNamePrefix, p, -1);
        any_failed = true;
        p = skip_to_bar_or_newline(p);
        continue;
      }
      const int stream = find_alias(options_.aliases, name, static_cast<size_t>(p - name));
      if (stream < 0) {
        note(result_.stats.unknown_inputs, result_.stats.first_unknown_offset, bar);
        p = skip_to_bar_or_newline(p);
        continue;
      }
      if (row_mark_[stream] == row_id_) {
        fail(kDuplicateInput, bar, stream);
        any_failed = true;
        p = skip_to_bar_or_newline(p);
        continue;
      }
      row_mark_[stream] = row_id_;
      const bool ok = options_.aliases[stream].sparse ? sparse_sample(p, stream) : dense_sample(p, stream, bar);
      any_valid |= ok;
      any_failed |= !ok;
    }
    if (any_failed && !any_valid) fail(kEmptyRow, row_start, -1);
    return p;
  }

  // Scans the value at p; on success stores it in `out` and advances p.
  bool value(const char*& p, int stream, T& out) {
    double parsed = 0.0;
    const char* next = p;
    const NumberStatus status = scan_number(p, fast_limit_, parsed, &next);
    if (status == NumberStatus::out_of_range) {
      fail(kValueOutOfRange, p, stream);
      return false;
    }
    if (status != NumberStatus::ok || !ends_value(static_cast<unsigned char>(*next))) {
      fail(kBadNumber, next, stream);
      return false;
    }
    out = static_cast<T>(parsed);
    if (std::isinf(out)) {
      fail(kValueOutOfRange, p, stream);
      return false;
    }
    p = next;
    return true;
  }

  bool dense_sample(const char*& p, int stream, const char* bar) {
    StreamBuffers<T>& buffers = result_.streams[stream];
    const uint64_t dim = options_.aliases[stream].dim;
    const size_t start = buffers.values.size();
    buffers.values.resize(start + dim);
    T* out = buffers.values.data() + start;
    uint64_t count = 0;
    while (true) {
      while (is_blank(static_cast<unsigned char>(*p))) ++p;
      if (ends_value(static_cast<unsigned char>(*p))) break;
      if (count == dim) {
        fail(kTooManyValues, bar, stream);
        return reject(buffers, start, p);
      }
      if (!value(p, stream, out[count])) return reject(buffers, start, p);
      ++count;
    }
    if (count < dim) {
      std::fill(out + count, out + dim, T{0});
      note(result_.stats.padded_samples, result_.stats.first_padded_offset, bar);
    }
    ++buffers.samples;
    return true;
  }

  bool sparse_sample(const char*& p, int stream) {
    StreamBuffers<T>& buffers = result_.streams[stream];
    const uint64_t dim = options_.aliases[stream].dim;
    const size_t start = buffers.values.size();
    while (true) {
      while (is_blank(static_cast<unsigned char>(*p))) ++p;
      if (ends_value(static_cast<unsigned char>(*p))) break;
      const char* index_start = p;
      uint64_t index = 0;
      bool overflow = false;
      for (; is_digit(static_cast<unsigned char>(*p)); ++p) {
        const uint64_t digit = static_cast<uint64_t>(*p - '0');
        overflow |= index > (UINT64_MAX - digit) / 10;
        index = index * 10 + digit;
      }
      if (p == index_start || overflow) {
        fail(kBadSparseIndex, index_start, stream);
        return reject(buffers, start, p);
      }
      if (*p != ':') {
        fail(kMissingColon, p, stream);
        return reject(buffers, start, p);
      }
      if (index >= dim) {
        fail(kIndexOutOfRange, index_start, stream);
        return reject(buffers, start, p);
      }
      ++p;
      T v{};
      if (!value(p, stream, v)) return reject(buffers, start, p);
      buffers.indices.push_back(static_cast<int32_t>(index));
      buffers.values.push_back(v);
    }
    if (options_.sort_sparse && !canonicalize(buffers, start)) {
      fail(kValueOutOfRange, p, stream);
      buffers.values.resize(start);
      buffers.indices.resize(start);
      return false;
    }
    buffers.indptr.push_back(static_cast<int64_t>(buffers.values.size()));
    ++buffers.samples;
    return true;
  }

  // Sorts the entries of the last sparse sample by index and sums duplicates; false when a sum overflows
  // the precision (a single out-of-range value is an error too).
  static bool canonicalize(StreamBuffers<T>& buffers, size_t start) {
    const size_t end = buffers.values.size();
    bool sorted = true;
    for (size_t k = start + 1; k < end && sorted; ++k) sorted = buffers.indices[k - 1] < buffers.indices[k];
    if (sorted) return true;
    std::vector<size_t> order(end - start);
    std::iota(order.begin(), order.end(), start);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return buffers.indices[a] < buffers.indices[b]; });
    std::vector<int32_t> indices;
    std::vector<T> values;
    for (size_t k : order) {
      if (!indices.empty() && indices.back() == buffers.indices[k]) {
        values.back() += buffers.values[k];
      } else {
        indices.push_back(buffers.indices[k]);
        values.push_back(buffers.values[k]);
      }
    }
    buffers.indices.resize(start);
    buffers.values.resize(start);
    buffers.indices.insert(buffers.indices.end(), indices.begin(), indices.end());
    buffers.values.insert(buffers.values.end(), values.begin(), values.end());
    for (const T v : values) {
      if (std::isinf(v)) return false;
    }
    return true;
  }

  // Drops a failed sample's values and skips the rest of it.
  static bool reject(StreamBuffers<T>& buffers, size_t start, const char*& p) {
    buffers.values.resize(start);
    if (buffers.indices.size() > start) buffers.indices.resize(start);
    p = skip_to_bar_or_newline(p);
    return false;
  }

  void fail(ErrorKind kind, const char* at, int stream) {
    result_.errors.push_back({base_ + (at - data_), kind, stream, sequence_, 0, 0, -1, base_ + starts_[sequence_],
                              base_ + ends_[sequence_]});
  }

  void note(int64_t& count, int64_t& first_offset, const char* at) {
    if (count++ == 0) first_offset = base_ + (at - data_);
  }

  const char* data_;
  int64_t size_;
  const char* fast_limit_;  // last position where an 8-byte load stays inside the buffer
  int64_t base_;
  const ParseOptions& options_;
  std::vector<int64_t> row_mark_;  // row id on which each stream was last seen
  int64_t row_id_ = 0;
  int64_t sequence_ = 0;
  const int64_t* starts_ = nullptr;  // the sequences' byte ranges (relative to data_)
  const int64_t* ends_ = nullptr;
  ParseResult<T> result_;
};

}  // namespace

template <class T>
ParseResult<T> parse_sequences(const char* data, int64_t size, int64_t base, int64_t first_line,
                               const int64_t* starts, const int64_t* ends, int64_t n, const ParseOptions& options,
                               const Reservation* room) {
  if (size > 0 && data[size - 1] == '\n') {
    return Parser<T>(data, size, base, options).run(starts, ends, n, first_line, room);
  }
  std::string terminated(data, static_cast<size_t>(size));  // final row without a newline
  terminated.push_back('\n');
  return Parser<T>(terminated.data(), size + 1, base, options).run(starts, ends, n, first_line, room);
}

namespace {

// A piece of the join: `count` values copied from `from` to `to`, `shift` added to each (offset arrays).
struct CopyPiece {
  void* to;
  const void* from;
  size_t count;
  size_t width;   // bytes per value
  int64_t shift;  // added to each int64 value; 0: a plain copy
};

void add_pieces(std::vector<CopyPiece>& pieces, void* to, const void* from, size_t count, size_t width,
                int64_t shift, size_t piece_bytes) {
  const size_t step = std::max<size_t>(piece_bytes / width, 1);
  for (size_t at = 0; at < count; at += step) {
    pieces.push_back({static_cast<char*>(to) + at * width, static_cast<const char*>(from) + at * width,
                      std::min(step, count - at), width, shift});
  }
}

void copy_piece(const CopyPiece& piece) {
  if (piece.shift == 0) {
    std::memcpy(piece.to, piece.from, piece.count * piece.width);
    return;
  }
  const auto* from = static_cast<const int64_t*>(piece.from);
  auto* to = static_cast<int64_t*>(piece.to);
  for (size_t i = 0; i < piece.count; ++i) to[i] = from[i] + piece.shift;
}

// Adds a run's errors (their sequence numbers shifted) and notes to the joined result.
template <class T>
void add_notes(ParseResult<T>& into, const ParseResult<T>& part, int64_t first_sequence) {
  for (ErrorRecord e : part.errors) {
    e.sequence += first_sequence;
    into.errors.push_back(e);
  }
  ParseStats& x = into.stats;
  const ParseStats& y = part.stats;
  if (x.first_padded_offset < 0 && y.first_padded_offset >= 0) {
    x.first_padded_offset = y.first_padded_offset;
    x.first_padded_line = y.first_padded_line;
    x.first_padded_column = y.first_padded_column;
  }
  if (x.first_unknown_offset < 0 && y.first_unknown_offset >= 0) {
    x.first_unknown_offset = y.first_unknown_offset;
    x.first_unknown_line = y.first_unknown_line;
    x.first_unknown_column = y.first_unknown_column;
  }
  x.padded_samples += y.padded_samples;
  x.unknown_inputs += y.unknown_inputs;
}

// Joins the runs after the first onto it: each array grows to its total (run 0 reserved room for every run), then the
// runs' arrays are copied into place in pieces spread over `threads` threads (offset arrays shifted as they go).
template <class T>
ParseResult<T> join_runs(std::vector<ParseResult<T>>& results, const std::vector<int64_t>& cut, size_t threads) {
  ParseResult<T> joined = std::move(results[0]);
  std::vector<CopyPiece> pieces;
  size_t total_bytes = 0;
  for (size_t k = 1; k < results.size(); ++k) {
    for (const StreamBuffers<T>& b : results[k].streams) {
      total_bytes += b.values.size() * sizeof(T) + b.indices.size() * 4 + (b.indptr.size() + b.seq_offsets.size()) * 8;
    }
  }
  const size_t piece_bytes = std::max<size_t>(total_bytes / (4 * threads), size_t{1} << 16);
  for (size_t s = 0; s < joined.streams.size(); ++s) {
    StreamBuffers<T>& into = joined.streams[s];
    size_t values = into.values.size(), indices = into.indices.size(), indptr = into.indptr.size(),
           offsets = into.seq_offsets.size();
    for (size_t k = 1; k < results.size(); ++k) {
      const StreamBuffers<T>& b = results[k].streams[s];
      values += b.values.size();
      indices += b.indices.size();
      indptr += b.indptr.size() - 1;
      offsets += b.seq_offsets.size() - 1;
    }
    size_t at_values = into.values.size(), at_indices = into.indices.size(), at_indptr = into.indptr.size(),
           at_offsets = into.seq_offsets.size();
    int64_t samples = into.samples;
    into.values.resize(values);
    into.indices.resize(indices);
    into.indptr.resize(indptr);
    into.seq_offsets.resize(offsets);
    for (size_t k = 1; k < results.size(); ++k) {
      const StreamBuffers<T>& b = results[k].streams[s];
      add_pieces(pieces, into.values.data() + at_values, b.values.data(), b.values.size(), sizeof(T), 0, piece_bytes);
      add_pieces(pieces, into.indices.data() + at_indices, b.indices.data(), b.indices.size(), 4, 0, piece_bytes);
      add_pieces(pieces, into.indptr.data() + at_indptr, b.indptr.data() + 1, b.indptr.size() - 1, 8,
                 static_cast<int64_t>(at_values), piece_bytes);
      add_pieces(pieces, into.seq_offsets.data() + at_offsets, b.seq_offsets.data() + 1, b.seq_offsets.size() - 1, 8,
                 samples, piece_bytes);
      at_values += b.values.size();
      at_indices += b.indices.size();
      at_indptr += b.indptr.size() - 1;
      at_offsets += b.seq_offsets.size() - 1;
      samples += b.samples;
    }
    into.samples = samples;
  }
  on_threads(threads, [&](size_t k) {
    for (size_t i = k; i < pieces.size(); i += threads) copy_piece(pieces[i]);
  });
  size_t errors = joined.errors.size();
  for (size_t k = 1; k < results.size(); ++k) errors += results[k].errors.size();
  joined.errors.reserve(errors);
  for (size_t k = 1; k < results.size(); ++k) add_notes(joined, results[k], cut[k]);
  return joined;
}


// Adds `lines` to the line numbers of a run's errors and notes (located from the run's first line, as line 0).
template <class T>
void shift_lines(ParseResult<T>& r, int64_t lines) {
  for (ErrorRecord& e : r.errors) e.line += lines;
  if (r.stats.first_padded_offset >= 0) r.stats.first_padded_line += lines;
  if (r.stats.first_unknown_offset >= 0) r.stats.first_unknown_line += lines;
}

template <class T>
bool has_located(const ParseResult<T>& r) {
  return !r.errors.empty() || r.stats.first_padded_offset >= 0 || r.stats.first_unknown_offset >= 0;
}

}  // namespace

template <class T>
ParseResult<T> parse_file_range(int fd, int64_t start, int64_t size, int64_t first_line, const int64_t* starts,
                                const int64_t* ends, const int64_t* lengths, int64_t n, const ParseOptions& options,
                                int parts, int64_t min_part_bytes) {
  parts = static_cast<int>(std::min<int64_t>({parts, n, size / std::max<int64_t>(min_part_bytes, 1)}));
  // run k: sequences [cut[k], cut[k + 1]), bytes [starts[cut[k]], starts[cut[k + 1]]) (the first from 0, the last
  // to the end): each begins where a sequence, so a line, begins
  std::vector<int64_t> cut{0};
  for (int k = 1; k < parts; ++k) {
    const int64_t target = size / parts * k;
    const int64_t at = std::lower_bound(starts, starts + n, target) - starts;
    if (at > cut.back() && at < n) cut.push_back(at);
  }
  cut.push_back(n);
  const size_t runs = cut.size() - 1;
  auto from = [&](size_t k) { return k == 0 ? int64_t{0} : starts[cut[k]]; };
  auto to = [&](size_t k) { return k + 1 == runs ? size : starts[cut[k + 1]]; };
  std::vector<Reservation> rooms(runs);  // with sample counts: run 0 has room for every run, joined onto it
  for (size_t k = 0; k < runs && lengths != nullptr; ++k) {
    rooms[k] = {std::accumulate(lengths + cut[k], lengths + cut[k + 1], int64_t{0}), to(k) - from(k),
                cut[k + 1] - cut[k]};
  }
  if (lengths != nullptr) rooms[0] = {std::accumulate(lengths, lengths + n, int64_t{0}), size, n};
  std::vector<Buffer<char>> texts(runs);
  std::vector<ParseResult<T>> results(runs);
  on_threads(runs, [&](size_t k) {  // each run reads its own bytes and parses them, its lines counted from 0
    const int64_t a = cut[k], b = cut[k + 1], begin = from(k), length = to(k) - begin;
    Buffer<char>& text = texts[k];
    text.reserve(static_cast<size_t>(length) + 1);
    text.resize(static_cast<size_t>(length));
    read_exact(fd, start + begin, length, text.data());
    if (text.empty() || text.back() != '\n') text.push_back('\n');  // the final row without a newline
    std::vector<int64_t> run_starts(starts + a, starts + b), run_ends(ends + a, ends + b);
    for (int64_t& v : run_starts) v -= begin;
    for (int64_t& v : run_ends) v -= begin;
    results[k] = parse_sequences<T>(text.data(), static_cast<int64_t>(text.size()), start + begin,
                                    k == 0 ? first_line : 0, run_starts.data(), run_ends.data(), b - a, options,
                                    lengths != nullptr ? &rooms[k] : nullptr);
  });
  int64_t lines = first_line;  // before run k; counted only as far as a later run has errors or notes to place
  size_t counted = 0;
  for (size_t k = 1; k < runs; ++k) {
    if (!has_located(results[k])) continue;
    for (; counted < k; ++counted) lines += std::count(texts[counted].begin(), texts[counted].end(), '\n');
    shift_lines(results[k], lines);
  }
  texts.clear();
  if (runs == 1) return std::move(results[0]);
  return join_runs(results, cut, runs);
}

template ParseResult<float> parse_file_range<float>(int, int64_t, int64_t, int64_t, const int64_t*, const int64_t*,
                                                    const int64_t*, int64_t, const ParseOptions&, int, int64_t);
template ParseResult<double> parse_file_range<double>(int, int64_t, int64_t, int64_t, const int64_t*, const int64_t*,
                                                      const int64_t*, int64_t, const ParseOptions&, int, int64_t);
template ParseResult<float> parse_sequences<float>(const char*, int64_t, int64_t, int64_t, const int64_t*,
                                                   const int64_t*, int64_t, const ParseOptions&, const Reservation*);
template ParseResult<double> parse_sequences<double>(const char*, int64_t, int64_t, int64_t, const int64_t*,
                                                     const int64_t*, int64_t, const ParseOptions&,
                                                     const Reservation*);

}  // namespace cntkio::ctf
