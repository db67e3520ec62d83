// Fuzz target of the native key join (libFuzzer entry point): two key columns built from the input bytes
// (texts cut at '\n', or integers of either signedness) are joined by value or by text, and the result is
// checked against a plain quadratic search: every match holds an equal key (the first or last copy, as
// asked), every -1 has no equal key, and the duplicate count is the number of extra copies.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src/native/keys.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::keys;

namespace {

struct Owned {
  std::vector<uint8_t> blob;
  std::vector<int64_t> offsets{0};
  std::vector<uint64_t> ints;
  Column column;
};

// A column from `text`: lines as texts, or each line's digits (with an optional '-') as an integer.
void build(const std::string& text, bool numeric, bool is_unsigned, Owned& o) {
  size_t start = 0;
  while (start <= text.size() && o.offsets.size() < 64) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (numeric) {
      const bool negative = !line.empty() && line[0] == '-' && !is_unsigned;
      uint64_t value = 0;
      for (const char c : line) value = value * 10 + static_cast<uint64_t>(static_cast<uint8_t>(c) % 10);
      o.ints.push_back(negative ? static_cast<uint64_t>(-static_cast<int64_t>(value % 1000)) : value % 1000);
    } else {
      o.blob.insert(o.blob.end(), line.begin(), line.end());
      o.offsets.push_back(static_cast<int64_t>(o.blob.size()));
    }
    start = end + 1;
  }
  o.column.kind = numeric ? (is_unsigned ? Column::Kind::unsigned_int : Column::Kind::signed_int) : Column::Kind::text;
  o.column.ints = o.ints.data();
  o.column.blob = o.blob.data();
  o.column.offsets = o.offsets.data();
  o.column.size = numeric ? static_cast<int64_t>(o.ints.size()) : static_cast<int64_t>(o.offsets.size()) - 1;
}

std::string text_of(const Owned& o, int64_t i) {
  switch (o.column.kind) {
    case Column::Kind::text:
      return std::string(o.blob.begin() + o.offsets[i], o.blob.begin() + o.offsets[i + 1]);
    case Column::Kind::signed_int:
      return std::to_string(static_cast<int64_t>(o.ints[i]));
    case Column::Kind::unsigned_int:
      return std::to_string(o.ints[i]);
  }
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t cut = rest.find('|');
  const std::string first = rest.substr(0, cut), second = cut == std::string::npos ? rest : rest.substr(cut + 1);
  const bool by_text = flags & 1, keep_last = flags & 2;
  Owned primary, secondary;
  // by value: both numeric; by text: any mix of texts and numbers
  build(first, !by_text || (flags & 4), flags & 8, primary);
  build(second, !by_text || (flags & 16), flags & 32, secondary);
  const Compare compare = by_text ? Compare::text : Compare::value;
  const Join join_result = cntkio::keys::join(primary.column, secondary.column, compare, keep_last);
  const Duplicates dups = duplicates(secondary.column, compare);
  check(join_result.match64.empty() && static_cast<int64_t>(join_result.match32.size()) == primary.column.size);
  check(dups.count == join_result.duplicates.count);
  auto same = [&](int64_t i, int64_t j) {  // key i of the primary equals key j of the secondary
    return text_of(primary, i) == text_of(secondary, j);  // by value too: equal decimal texts, equal values
  };
  int64_t extra = 0;
  for (int64_t j = 0; j < secondary.column.size; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      if (text_of(secondary, k) == text_of(secondary, j)) {
        ++extra;
        break;
      }
    }
  }
  check(extra == dups.count);
  for (int64_t i = 0; i < primary.column.size; ++i) {
    int64_t expected = -1;
    for (int64_t j = 0; j < secondary.column.size; ++j) {
      if (same(i, j)) {
        expected = j;
        if (!keep_last) break;
      }
    }
    check(join_result.match32[i] == expected);
  }
  const std::vector<uint64_t> hashes = cntk_hash(secondary.column);
  for (int64_t j = 0; j < secondary.column.size; ++j) {
    uint64_t h = 5381;
    for (const char c : text_of(secondary, j)) h = (h * 33) ^ static_cast<uint64_t>(static_cast<int64_t>(static_cast<signed char>(c)));
    check(hashes[j] == h);
  }
  return 0;
}
