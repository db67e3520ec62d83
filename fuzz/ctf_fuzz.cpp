// Fuzz target of the native CTF indexer and parser (libFuzzer entry point).
//
// The input is a CTF file: it is indexed from a memory file descriptor (as the reader does), then every
// chunk is parsed in float and double. Any crash, sanitizer report or broken invariant is a bug.
// Build with clang: clang++ -fsanitize=fuzzer,address,undefined ...; without clang, standalone_main.cpp
// drives the same entry point (see run_smoke.sh).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/native/ctf.hpp"
#include "../src/native/file_io.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::ctf;

namespace {

template <class V>
bool same_bytes(const V& a, const V& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

template <class T>
void same_result(const ParseResult<T>& a, const ParseResult<T>& b) {
  check(a.streams.size() == b.streams.size() && a.errors.size() == b.errors.size());
  for (size_t s = 0; s < a.streams.size(); ++s) {
    const StreamBuffers<T>& x = a.streams[s];
    const StreamBuffers<T>& y = b.streams[s];
    check(x.samples == y.samples && same_bytes(x.values, y.values) && same_bytes(x.indices, y.indices));
    check(same_bytes(x.indptr, y.indptr) && same_bytes(x.seq_offsets, y.seq_offsets));
  }
  for (size_t i = 0; i < a.errors.size(); ++i) {
    const ErrorRecord& x = a.errors[i];
    const ErrorRecord& y = b.errors[i];
    check(x.offset == y.offset && x.kind == y.kind && x.stream == y.stream && x.sequence == y.sequence);
    check(x.line == y.line && x.column == y.column && x.byte == y.byte && x.record == y.record && x.end == y.end);
  }
  check(a.stats.padded_samples == b.stats.padded_samples && a.stats.unknown_inputs == b.stats.unknown_inputs);
  check(a.stats.first_padded_offset == b.stats.first_padded_offset && a.stats.first_padded_line == b.stats.first_padded_line);
  check(a.stats.first_unknown_offset == b.stats.first_unknown_offset &&
        a.stats.first_unknown_line == b.stats.first_unknown_line);
}

template <class T>
void parse_chunks(int fd, const IndexResult& index, const ParseOptions& options) {
  for (size_t c = 0; c + 1 < index.chunk_starts.size(); ++c) {
    const int64_t a = index.chunk_starts[c], b = index.chunk_starts[c + 1];
    const int64_t start = index.offsets[a], end = index.ends[b - 1];
    std::vector<char> buffer(static_cast<size_t>(end - start));
    cntkio::read_exact(fd, start, end - start, buffer.data());
    if (buffer.empty() || buffer.back() != '\n') buffer.push_back('\n');
    std::vector<int64_t> starts, ends;
    for (int64_t i = a; i < b; ++i) {
      starts.push_back(index.offsets[i] - start);
      ends.push_back(index.ends[i] - start);
    }
    ParseResult<T> r = parse_sequences<T>(buffer.data(), static_cast<int64_t>(buffer.size()), start,
                                          index.chunk_first_lines[c], starts.data(), ends.data(), b - a, options);
    for (size_t s = 0; s < r.streams.size(); ++s) {
      const StreamBuffers<T>& stream = r.streams[s];
      check(static_cast<int64_t>(stream.seq_offsets.size()) == b - a + 1);
      check(stream.seq_offsets.back() == stream.samples);
      if (options.aliases[s].sparse) {
        check(static_cast<int64_t>(stream.indptr.size()) == stream.samples + 1);
        check(stream.indptr.back() == static_cast<int64_t>(stream.values.size()));
        for (int32_t i : stream.indices) check(i >= 0 && static_cast<uint64_t>(i) < options.aliases[s].dim);
      } else {
        check(stream.values.size() >= static_cast<size_t>(stream.samples) * options.aliases[s].dim);
      }
    }
    for (const ErrorRecord& e : r.errors) {
      check(e.offset >= start && e.offset <= end && e.line >= 1 && e.column >= 1);
      check(e.record == index.offsets[a + e.sequence] && e.end == index.ends[a + e.sequence]);
    }
    // read and parsed in runs on threads of their own (tiny runs allowed), joined: exactly the same result
    const std::vector<int64_t> lengths(index.lengths.begin() + a, index.lengths.begin() + b);
    const ParseResult<T> runs = parse_file_range<T>(fd, start, end - start, index.chunk_first_lines[c], starts.data(),
                                                    ends.data(), lengths.data(), b - a, options, 3, 1);
    same_result(r, runs);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file("ctf", data, size);
  if (fd < 0) return 0;
  const std::vector<Alias> aliases = {{"a", false, 3}, {"b", true, 50}, {"c", false, 1}};
  for (int variant = 0; variant < 2; ++variant) {
    IndexOptions options;
    options.aliases = aliases;
    options.force_line_mode = variant == 1;
    options.count_lines = variant == 1;
    options.require_all_inputs = variant == 0;
    options.defining_stream = variant == 1 ? 2 : -1;
    options.chunk_size = 64;
    options.block_size = 4096;
    const IndexResult index = index_file(fd, static_cast<int64_t>(size), options);
    IndexOptions halves = options;  // indexing in parts at once must give exactly the same index
    halves.threads = 3;
    halves.parallel_min_bytes = 0;
    const IndexResult split = index_file(fd, static_cast<int64_t>(size), halves);
    check(split.fatal == index.fatal && split.fatal_line == index.fatal_line && split.fatal_offset == index.fatal_offset);
    check(split.offsets == index.offsets && split.ends == index.ends && split.lengths == index.lengths);
    check(split.keys == index.keys && split.key_blob == index.key_blob && split.key_offsets == index.key_offsets);
    check(split.chunk_starts == index.chunk_starts && split.chunk_first_lines == index.chunk_first_lines);
    check(split.errors.size() == index.errors.size() && split.error_keys == index.error_keys);
    check(split.total_lines == index.total_lines && split.dropped_lines == index.dropped_lines);
    if (!index.fatal.empty()) continue;
    check(index.offsets.size() == index.ends.size() && index.offsets.size() == index.lengths.size());
    check(!index.chunk_starts.empty() && index.chunk_starts.back() == static_cast<int64_t>(index.offsets.size()));
    ParseOptions parse;
    parse.mode = index.mode;
    parse.aliases = aliases;
    parse.sort_sparse = variant == 0;
    parse_chunks<float>(fd, index, parse);
    parse_chunks<double>(fd, index, parse);
  }
  close(fd);
  return 0;
}
