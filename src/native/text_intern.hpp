// Text interning shared by the SCP parser and the image map scanner: a 64-bit hash of a byte string, and an
// Interner that numbers distinct texts in first-seen order and stores them in a caller-owned blob + offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace cntkio {

// A 64-bit hash of a byte string (8 bytes at a time, then a final mix).
inline uint64_t hash_text(std::string_view text) {
  const char* p = text.data();
  size_t n = text.size();
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (static_cast<uint64_t>(n) * 0xbf58476d1ce4e5b9ULL);
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    h = (h ^ word) * 0xff51afd7ed558ccdULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t tail = 0;  // the last 0-7 bytes, read without a call to memcpy
  if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    tail = (static_cast<uint64_t>(a) << 32) | b;
  } else if (n > 0) {
    tail = (static_cast<uint64_t>(static_cast<unsigned char>(p[0])) << 16) |
           (static_cast<uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8) | static_cast<unsigned char>(p[n - 1]);
  }
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 32;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// Distinct texts in a blob + offsets (owned by the caller; offsets starts as {0} and text `id` is
// blob[offsets[id], offsets[id + 1])), numbered in first-seen order. A slot holds the high 32 bits of the
// text's hash and id + 1 (0: empty), so that most probes that do not match cost no further memory access; the
// table is at most half full. The full hashes are kept per id for growing.
class Interner {
 public:
  Interner(std::vector<uint8_t>& blob, std::vector<int64_t>& offsets) : blob_(blob), offsets_(offsets) {}

  std::string_view text(int32_t id) const {
    const int64_t b = offsets_[static_cast<size_t>(id)], e = offsets_[static_cast<size_t>(id) + 1];
    return {reinterpret_cast<const char*>(blob_.data()) + b, static_cast<size_t>(e - b)};
  }

  // The id of `t`, appended to the blob + offsets when it is new.
  int32_t intern(std::string_view t) {
    if (last_ >= 0 && text(last_) == t) return last_;  // consecutive lines often share a path or an archive
    const uint64_t h = hash_text(t);
    if ((hashes_.size() + 1) * 2 > slots_.size()) grow();
    const uint64_t tag = h & 0xffffffff00000000ULL;
    const size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      const uint64_t slot = slots_[i];
      if (slot == 0) {
        const auto id = static_cast<int32_t>(offsets_.size() - 1);
        slots_[i] = tag | (static_cast<uint64_t>(id) + 1);
        hashes_.push_back(h);
        blob_.insert(blob_.end(), t.begin(), t.end());
        offsets_.push_back(static_cast<int64_t>(blob_.size()));
        return last_ = id;
      }
      if ((slot & 0xffffffff00000000ULL) != tag) continue;
      const auto id = static_cast<int32_t>((slot & 0xffffffffULL) - 1);
      if (text(id) == t) return last_ = id;
    }
  }

  // Frees the table (the blob + offsets are left to the caller, who resets them before the next intern).
  void clear() {
    std::vector<uint64_t>().swap(slots_);
    std::vector<uint64_t>().swap(hashes_);
    last_ = -1;
  }

 private:
  void grow() {
    std::vector<uint64_t> slots(std::max<size_t>(slots_.size() * 2, 1024), 0);
    const size_t mask = slots.size() - 1;
    for (size_t id = 0; id < hashes_.size(); ++id) {
      size_t i = static_cast<size_t>(hashes_[id]) & mask;
      while (slots[i] != 0) i = (i + 1) & mask;
      slots[i] = (hashes_[id] & 0xffffffff00000000ULL) | (static_cast<uint64_t>(id) + 1);
    }
    slots_.swap(slots);
  }

  std::vector<uint8_t>& blob_;
  std::vector<int64_t>& offsets_;
  std::vector<uint64_t> slots_;
  std::vector<uint64_t> hashes_;  // per id
  int32_t last_ = -1;
};

}  // namespace cntkio
