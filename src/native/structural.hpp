// Bitmasks of the bytes that give CTF text its structure ('\n' and '|'), 64 bytes at a time: a scanner visits
// these bytes in order with one bit test each instead of one memchr call per line and per stream marker.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace cntkio::ctf {

struct StructuralMasks {
  uint64_t newlines = 0;
  uint64_t bars = 0;
};

// Masks of the 64 bytes at p (all readable).
inline StructuralMasks structural_masks64(const char* p) {
  StructuralMasks m;
#if defined(__SSE2__)
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i bar = _mm_set1_epi8('|');
  for (int k = 0; k < 4; ++k) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * k));
    m.newlines |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, newline)))) << (16 * k);
    m.bars |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(bytes, bar)))) << (16 * k);
  }
#else
  for (int i = 0; i < 64; ++i) {
    m.newlines |= static_cast<uint64_t>(p[i] == '\n') << i;
    m.bars |= static_cast<uint64_t>(p[i] == '|') << i;
  }
#endif
  return m;
}

// Calls on_bar(const char*) and on_newline(const char*) for every '|' and '\n' of [begin, end), in order. Either
// returns false to stop the scan (then false is returned).
template <class OnBar, class OnNewline>
bool for_each_structural(const char* begin, const char* end, OnBar&& on_bar, OnNewline&& on_newline) {
  char tail[64];
  for (const char* block = begin; block < end; block += 64) {
    const int64_t available = end - block;
    StructuralMasks m;
    if (available >= 64) {
      m = structural_masks64(block);
    } else {
      std::memset(tail, 0, sizeof tail);
      std::memcpy(tail, block, static_cast<size_t>(available));
      m = structural_masks64(tail);
    }
    uint64_t events = m.newlines | m.bars;
    while (events != 0) {
      const int i = __builtin_ctzll(events);
      events &= events - 1;
      const bool ok = (m.newlines >> i) & 1 ? on_newline(block + i) : on_bar(block + i);
      if (!ok) return false;
    }
  }
  return true;
}

}  // namespace cntkio::ctf
