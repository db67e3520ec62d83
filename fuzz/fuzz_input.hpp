// What the fuzz targets share: the invariant check, and the leading input bytes read as small numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>

// A broken invariant: abort, so the fuzzer (or the standalone driver) reports the input.
inline void check(bool condition) {
  if (!condition) std::abort();
}

// The fuzz input's leading bytes, one a number in [0, range) (0 once the input is used up).
struct ByteReader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint32_t next(uint32_t range) { return at < size ? data[at++] % range : 0; }
};
