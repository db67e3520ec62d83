// Sequence keys as columns, and the join of a primary deserializer's keys to a secondary's: an open-
// addressing hash table over the secondary's keys (4 bytes a slot, half full), probed with every primary key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cntkio::keys {

// A key column: integers (signed or unsigned 64-bit), or UTF-8 texts blob[offsets[i], offsets[i + 1]).
struct Column {
  enum class Kind { signed_int, unsigned_int, text } kind = Kind::signed_int;
  const uint64_t* ints = nullptr;
  const uint8_t* blob = nullptr;
  const int64_t* offsets = nullptr;
  int64_t size = 0;
};

// How keys compare: integers by value, or everything by its decimal/UTF-8 text (as soon as a text key
// column takes part, a numeric key 12 equals the text key "12").
enum class Compare { value, text };

struct Duplicates {
  int64_t count = 0;              // keys seen again after their first occurrence
  std::vector<int64_t> examples;  // the first few later occurrences (row numbers)
};

struct Join {
  // Per primary key: the row of the secondary holding it, or -1; in `match32` when the secondary has
  // fewer than 2^31 - 1 rows (4 bytes a key), else in `match64`.
  std::vector<int32_t> match32;
  std::vector<int64_t> match64;
  Duplicates duplicates;  // in the secondary
};

constexpr size_t kExamples = 5;

// Joins `primary` to `secondary`; of a key that the secondary holds several times the first row is
// used (the last with `keep_last`).
Join join(const Column& primary, const Column& secondary, Compare compare, bool keep_last);

// Keys that occur more than once in a column.
Duplicates duplicates(const Column& column, Compare compare);

// CNTK's sequence-key hash (hashSequenceKeys): h = 5381; h = (h * 33) ^ (sign-extended byte), mod 2^64,
// over the key's text (a numeric key's decimal text).
std::vector<uint64_t> cntk_hash(const Column& column);

}  // namespace cntkio::keys
