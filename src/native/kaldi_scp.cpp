// Kaldi scp parser (see kaldi_scp.hpp): one pass over the bytes, lines found with memchr.
#include "kaldi_scp.hpp"

#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>

namespace cntkio::kaldi {
namespace {

bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The value of the decimal digits [b, e), or -1 when it is not below 2**63.
int64_t decimal(const uint8_t* b, const uint8_t* e) {
  while (b < e && *b == '0') ++b;
  if (e - b > 19) return -1;
  uint64_t value = 0;
  for (; b < e; ++b) value = value * 10 + static_cast<uint64_t>(*b - '0');
  return value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? -1 : static_cast<int64_t>(value);
}

void append(std::vector<uint8_t>& blob, std::vector<int64_t>& offsets, const uint8_t* b, const uint8_t* e) {
  blob.insert(blob.end(), b, e);
  offsets.push_back(static_cast<int64_t>(blob.size()));
}

}  // namespace

ScpEntries parse_scp(const uint8_t* data, size_t size) {
  ScpEntries out;
  std::unordered_map<std::string_view, int32_t> path_numbers;
  const uint8_t* const end = data + size;
  int64_t line = 0;
  for (const uint8_t* at = data; at < end;) {
    const auto* newline = static_cast<const uint8_t*>(std::memchr(at, '\n', static_cast<size_t>(end - at)));
    const uint8_t* line_end = newline != nullptr ? newline : end;
    const uint8_t* const line_start = at;
    at = newline != nullptr ? newline + 1 : end;
    ++line;
    const uint8_t* b = line_start;
    const uint8_t* e = line_end;
    while (b < e && is_space(*b)) ++b;
    while (e > b && is_space(e[-1])) --e;
    if (b == e) continue;
    const uint8_t* key_end = b;
    while (key_end < e && !is_space(*key_end)) ++key_end;
    const uint8_t* target = key_end;
    while (target < e && is_space(*target)) ++target;
    const auto problem = [&](ScpProblem why) {
      out.problems.push_back(why);
      out.problem_lines.push_back(line);
      out.problem_offsets.push_back(line_start - data);
    };
    if (target == e) {
      problem(kNoTarget);
      break;
    }
    if (e[-1] == '|' || e[-1] == ']') {
      problem(e[-1] == '|' ? kPipe : kRowRange);
      break;
    }
    const uint8_t* colon = e;
    while (colon > target && colon[-1] != ':') --colon;  // just past the last ':' (target: none)
    const uint8_t* path_end = e;
    int64_t offset = 0;
    bool checked = false;
    if (colon > target + 1 && colon < e) {  // "path:digits"?
      const uint8_t* d = colon;
      while (d < e && *d >= '0' && *d <= '9') ++d;
      if (d == e) {
        offset = decimal(colon, e);
        if (offset < 0) {
          problem(kHugeOffset);
          continue;
        }
        path_end = colon - 1;
        checked = true;
      }
    }
    const std::string_view path(reinterpret_cast<const char*>(target), static_cast<size_t>(path_end - target));
    const auto [found, added] = path_numbers.try_emplace(path, static_cast<int32_t>(path_numbers.size()));
    if (added) append(out.path_blob, out.path_offsets, target, path_end);
    out.path_ids.push_back(found->second);
    append(out.key_blob, out.key_offsets, b, key_end);
    out.offsets.push_back(offset);
    out.checked_keys.push_back(checked ? 1 : 0);
  }
  return out;
}

}  // namespace cntkio::kaldi
