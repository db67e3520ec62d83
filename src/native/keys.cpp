// The key join: a hash table of row numbers (linear probing, at most half full) over one column.
#include "keys.hpp"

#include <sys/mman.h>

#include <charconv>
#include <cstring>
#include <new>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>

namespace cntkio::keys {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: spreads every input bit over the whole word
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The keys of one column as values or texts; a numeric key's text is formatted into a buffer of its own.
class Reader {
 public:
  Reader(const Column& column, Compare compare) : c_(column), by_text_(compare == Compare::text) {
    if (!by_text_ && c_.kind == Column::Kind::text) throw std::invalid_argument("text keys compare as text");
  }

  std::string_view text(int64_t i) {
    switch (c_.kind) {
      case Column::Kind::text:
        return {reinterpret_cast<const char*>(c_.blob + c_.offsets[i]), static_cast<size_t>(c_.offsets[i + 1] - c_.offsets[i])};
      case Column::Kind::signed_int:
        return format(static_cast<int64_t>(c_.ints[i]));
      case Column::Kind::unsigned_int:
        return format(c_.ints[i]);
    }
    return {};
  }

  uint64_t hash(int64_t i) {
    if (!by_text_) return mix(c_.ints[i]);
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (const char ch : text(i)) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ULL;
    return mix(h);
  }

  // Whether key i of this column equals key j of `other` (compared the same way).
  bool equals(int64_t i, Reader& other, int64_t j) {
    if (!by_text_) {
      const uint64_t a = c_.ints[i], b = other.c_.ints[j];
      // A negative signed key has the bits of an unsigned key >= 2^63: equal bits name the same value
      // only when both columns have the same signedness or the top bit is clear.
      return a == b && (c_.kind == other.c_.kind || (a >> 63) == 0);
    }
    const std::string_view x = text(i);
    const std::string_view y = other.text(j);
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0);
  }

  int64_t size() const { return c_.size; }

 private:
  template <class T>
  std::string_view format(T value) {
    const auto end = std::to_chars(buffer_, buffer_ + sizeof buffer_, value).ptr;
    return {buffer_, static_cast<size_t>(end - buffer_)};
  }

  const Column& c_;
  bool by_text_;
  char buffer_[24];
};

// Row numbers of a column in a table of 2^k slots (-1: empty). The slots are pages of their own
// (mmap): freeing the table gives its memory back at once instead of leaving the heap grown.
template <class Slot>
class Table {
 public:
  explicit Table(int64_t rows) {
    size_t capacity = 16;
    while (capacity < static_cast<size_t>(rows) * 2) capacity <<= 1;
    bytes_ = capacity * sizeof(Slot);
    void* pages = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) throw std::bad_alloc();
    slots_ = static_cast<Slot*>(pages);
    std::memset(slots_, 0xff, bytes_);  // every slot -1
    mask_ = capacity - 1;
  }
  ~Table() { munmap(slots_, bytes_); }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // Inserts every row of `column`; a key already present counts as a duplicate.
  Duplicates insert_all(Reader& column, Reader& probe, bool keep_last) {
    Duplicates dups;
    for (int64_t row = 0; row < column.size(); ++row) {
      for (size_t at = column.hash(row) & mask_;; at = (at + 1) & mask_) {
        Slot& slot = slots_[at];
        if (slot < 0) {
          slot = static_cast<Slot>(row);
          break;
        }
        if (probe.equals(slot, column, row)) {
          ++dups.count;
          if (dups.examples.size() < kExamples) dups.examples.push_back(row);
          if (keep_last) slot = static_cast<Slot>(row);
          break;
        }
      }
    }
    return dups;
  }

  // The row of `stored` holding key `row` of `keys`, or -1.
  int64_t find(Reader& keys, int64_t row, Reader& stored) const {
    for (size_t at = keys.hash(row) & mask_;; at = (at + 1) & mask_) {
      const Slot slot = slots_[at];
      if (slot < 0) return -1;
      if (stored.equals(slot, keys, row)) return slot;
    }
  }

 private:
  Slot* slots_ = nullptr;
  size_t bytes_ = 0;
  size_t mask_ = 0;
};

template <class Slot>
Join join_with(const Column& primary, const Column& secondary, Compare compare, bool keep_last) {
  Reader keys(primary, compare), stored(secondary, compare), probe(secondary, compare);
  Table<Slot> table(secondary.size);
  Join result;
  result.duplicates = table.insert_all(stored, probe, keep_last);
  std::vector<Slot>& match = [&]() -> std::vector<Slot>& {
    if constexpr (std::is_same_v<Slot, int32_t>) {
      return result.match32;
    } else {
      return result.match64;
    }
  }();
  match.resize(static_cast<size_t>(primary.size));
  for (int64_t row = 0; row < primary.size; ++row) match[row] = static_cast<Slot>(table.find(keys, row, stored));
  return result;
}

}  // namespace

Join join(const Column& primary, const Column& secondary, Compare compare, bool keep_last) {
  if (secondary.size < std::numeric_limits<int32_t>::max()) return join_with<int32_t>(primary, secondary, compare, keep_last);
  return join_with<int64_t>(primary, secondary, compare, keep_last);
}

Duplicates duplicates(const Column& column, Compare compare) {
  Reader keys(column, compare), probe(column, compare);
  if (column.size < std::numeric_limits<int32_t>::max()) return Table<int32_t>(column.size).insert_all(keys, probe, false);
  return Table<int64_t>(column.size).insert_all(keys, probe, false);
}

std::vector<uint64_t> cntk_hash(const Column& column) {
  Reader keys(column, Compare::text);
  std::vector<uint64_t> hashes(static_cast<size_t>(column.size));
  for (int64_t i = 0; i < column.size; ++i) {
    uint64_t h = 5381;
    for (const char ch : keys.text(i)) {
      h = ((h << 5) + h) ^ static_cast<uint64_t>(static_cast<int64_t>(static_cast<signed char>(ch)));
    }
    hashes[i] = h;
  }
  return hashes;
}

}  // namespace cntkio::keys
