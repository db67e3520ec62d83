// Fuzz target of the SCP parser (libFuzzer entry point): the input, written to a memfd, is parsed as an SCP file
// with a small block (lines crossing blocks) and a large one, with and without a prefix, and twice in a row as two
// files. The parse must not crash, and: the columns have consistent sizes, offsets ascend, path ids point into the
// distinct paths (which are distinct), a range is -1/-1 or two frame indices, the kept keys are distinct, lines
// exist in the input; both block sizes give the same result; a prefix changes neither the entries counted nor the
// error; the same file twice drops every entry as a duplicate; a fatal error names a position in the input.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../src/native/scp.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::scp;

namespace {

struct Run {
  bool ok = true;
  Fatal fatal;
  Result result;
};

Run parse(int fd, int64_t size, bool prefix, int64_t block, int files) {
  Options options;
  options.has_prefix = prefix;
  options.prefix = "/pre/";
  options.block_size = block;
  Parser parser(options);
  Run run;
  for (int i = 0; i < files && run.ok; ++i) run.ok = parser.add_file(fd, size, "/scp/dir");
  if (!run.ok) run.fatal = parser.fatal();
  run.result = parser.finish();
  return run;
}

std::string_view piece(const std::vector<uint8_t>& blob, const std::vector<int64_t>& offsets, size_t i) {
  return {reinterpret_cast<const char*>(blob.data()) + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i])};
}

int64_t entries(const Run& run) { return static_cast<int64_t>(run.result.path_ids.size()) + run.result.duplicate_entries; }

void check_run(const Run& run, const uint8_t* data, int64_t size, int files) {
  const Result& r = run.result;
  const size_t n = r.path_ids.size();
  check(r.key_offsets.size() == n + 1 && r.starts.size() == n && r.ends.size() == n && r.lines.size() == n &&
        r.source_ids.size() == n);
  check(r.key_offsets.front() == 0 && r.key_offsets.back() == static_cast<int64_t>(r.key_blob.size()));
  check(r.path_offsets.front() == 0 && r.path_offsets.back() == static_cast<int64_t>(r.path_blob.size()));
  for (size_t i = 0; i + 1 < r.key_offsets.size(); ++i) check(r.key_offsets[i + 1] >= r.key_offsets[i]);
  const size_t paths = r.path_offsets.size() - 1;
  std::set<std::string_view> distinct_paths;
  for (size_t i = 0; i < paths; ++i) {
    check(r.path_offsets[i + 1] > r.path_offsets[i]);  // a physical path is never empty
    check(distinct_paths.insert(piece(r.path_blob, r.path_offsets, i)).second);
  }
  const int64_t newlines = std::count(data, data + size, '\n');
  std::set<std::string_view> keys;
  for (size_t i = 0; i < n; ++i) {
    check(r.path_ids[i] >= 0 && static_cast<size_t>(r.path_ids[i]) < paths);
    check((r.starts[i] == -1 && r.ends[i] == -1) || (r.starts[i] >= 0 && r.ends[i] >= 0));
    check(r.lines[i] >= 1 && r.lines[i] <= newlines + 1);
    check(r.source_ids[i] >= 0 && r.source_ids[i] < files);
    if (i > 0 && r.source_ids[i] == r.source_ids[i - 1]) check(r.lines[i] > r.lines[i - 1]);
    check(keys.insert(piece(r.key_blob, r.key_offsets, i)).second);
  }
  check(r.duplicate_keys <= r.duplicate_entries && 2 * r.duplicate_keys <= r.duplicate_entries);
  check(r.first_duplicates.size() <= 5 && static_cast<int64_t>(r.first_duplicates.size()) <= r.duplicate_keys);
  if (!run.ok) {
    const Fatal& f = run.fatal;
    check(!f.message.empty() && f.offset >= 0 && f.offset <= size && f.line >= 1 && f.line <= newlines + 1);
    check(f.column >= 1);
    int64_t line_start = f.offset;
    while (line_start > 0 && data[line_start - 1] != '\n') --line_start;
    check(f.column <= f.offset - line_start + 1);  // columns count characters, never more than bytes
    check(f.has_detail == (f.message.find("{}") != std::string::npos));
  }
}

bool same(const Result& a, const Result& b) {
  return a.key_blob == b.key_blob && a.key_offsets == b.key_offsets && a.path_blob == b.path_blob &&
         a.path_offsets == b.path_offsets && a.path_ids == b.path_ids && a.starts == b.starts && a.ends == b.ends &&
         a.lines == b.lines && a.source_ids == b.source_ids && a.duplicate_entries == b.duplicate_entries &&
         a.duplicate_keys == b.duplicate_keys && a.first_duplicates == b.first_duplicates;
}

bool same_fatal(const Run& a, const Run& b) {
  return a.ok == b.ok && a.fatal.message == b.fatal.message && a.fatal.detail == b.fatal.detail &&
         a.fatal.offset == b.fatal.offset && a.fatal.line == b.fatal.line && a.fatal.column == b.fatal.column;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file("scp", data, size);
  if (fd < 0) return 0;
  const auto n = static_cast<int64_t>(size);
  const Run small = parse(fd, n, false, 256, 1);
  const Run large = parse(fd, n, false, 1 << 16, 1);
  const Run prefixed = parse(fd, n, true, 256, 1);
  const Run twice = parse(fd, n, false, 256, 2);
  close(fd);
  check_run(small, data, n, 1);
  check_run(prefixed, data, n, 1);
  check_run(twice, data, n, 2);
  check(same(small.result, large.result) && same_fatal(small, large));
  check(same_fatal(small, prefixed));
  if (small.ok) {
    check(entries(prefixed) == entries(small));
    check(twice.ok && twice.result.path_ids.empty() && twice.result.duplicate_entries == 2 * entries(small));
    check(twice.result.path_offsets == small.result.path_offsets && twice.result.path_blob == small.result.path_blob);
  } else {
    check(!twice.ok && same_fatal(small, twice));
  }
  return 0;
}
