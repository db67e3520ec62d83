// Fuzz target of the Kaldi scp parser (libFuzzer entry point): the input is parsed as a Kaldi scp file whole and as
// its lines one at a time. The parse never crashes, and: the columns have consistent sizes, keys and paths are
// non-empty and start with no whitespace (a key holds none at all), path ids point into distinct paths, an entry
// without an offset is not key-checked and has offset 0; every problem names a line start of the input, in order,
// the parse stopping at a problem other than a huge offset; and parsing line by line gives the same entries and
// problems as the whole (a line's parse does not depend on the others).
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../src/native/kaldi_scp.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::kaldi;

namespace {

bool space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string text(const std::vector<uint8_t>& blob, const std::vector<int64_t>& offsets, size_t i) {
  return std::string(blob.begin() + offsets[i], blob.begin() + offsets[i + 1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ScpEntries whole = parse_scp(data, size);
  const size_t entries = whole.path_ids.size();
  check(whole.key_offsets.size() == entries + 1 && whole.offsets.size() == entries);
  check(whole.checked_keys.size() == entries && whole.key_offsets.back() == int64_t(whole.key_blob.size()));
  check(whole.path_offsets.back() == int64_t(whole.path_blob.size()));
  const size_t paths = whole.path_offsets.size() - 1;
  std::set<std::string> distinct;
  for (size_t p = 0; p < paths; ++p) {
    const std::string path = text(whole.path_blob, whole.path_offsets, p);
    check(!path.empty() && !space(uint8_t(path.front())));  // ("a.ark\t:12": the path keeps its tab)
    check(distinct.insert(path).second);
  }
  for (size_t i = 0; i < entries; ++i) {
    const std::string key = text(whole.key_blob, whole.key_offsets, i);
    check(!key.empty());
    for (char c : key) check(!space(uint8_t(c)));
    check(whole.path_ids[i] >= 0 && size_t(whole.path_ids[i]) < paths && whole.offsets[i] >= 0);
    check(whole.checked_keys[i] == 1 || whole.offsets[i] == 0);
  }
  const size_t problems = whole.problems.size();
  check(whole.problem_lines.size() == problems && whole.problem_offsets.size() == problems);
  for (size_t k = 0; k < problems; ++k) {
    const int64_t at = whole.problem_offsets[k];
    check(at >= 0 && size_t(at) < size && (at == 0 || data[at - 1] == '\n'));
    check(k == 0 || whole.problem_offsets[k - 1] < at);
    check(whole.problems[k] >= kNoTarget && whole.problems[k] <= kHugeOffset);
    check(k + 1 == problems || whole.problems[k] == kHugeOffset);
  }
  // Line by line: the same entries and problems, until the parse stopped.
  std::vector<std::string> keys;
  std::vector<int64_t> offsets;
  std::vector<int32_t> kinds;
  size_t start = 0;
  bool stopped = false;
  while (start < size && !stopped) {
    size_t end = start;
    while (end < size && data[end] != '\n') ++end;
    const ScpEntries line = parse_scp(data + start, end - start);
    for (size_t i = 0; i < line.offsets.size(); ++i) {
      keys.push_back(text(line.key_blob, line.key_offsets, i));
      offsets.push_back(line.offsets[i]);
    }
    for (int32_t kind : line.problems) {
      kinds.push_back(kind);
      stopped = kind != kHugeOffset;
    }
    start = end + 1;
  }
  check(keys.size() == entries && kinds == whole.problems && offsets == whole.offsets);
  for (size_t i = 0; i < entries; ++i) check(keys[i] == text(whole.key_blob, whole.key_offsets, i));
  return 0;
}
