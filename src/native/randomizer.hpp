// CNTK-compatible block randomization (compat mode): MT19937-64, CNTK's swap shuffle and windows.
#pragma once

#include <cstdint>
#include <vector>

namespace cntkio::randomizer {

struct CompatOrder {
  std::vector<int64_t> units;         // unit ids (chunk-major file numbering) in reading order
  std::vector<int64_t> chunk_order;   // original chunk at each randomized chunk position
  std::vector<int64_t> window_begin;  // chunk window [begin, end) of each randomized position
  std::vector<int64_t> window_end;
};

// Order of one sweep exactly as CNTK's BlockRandomizer produces it for `seed` (= randomization
// seed + sweep index). `units_per_chunk` and `samples_per_chunk` describe the chunks in file order.
// `window` counts chunks, or samples when `sample_window` is set.
CompatOrder compat_block_order(const std::vector<int64_t>& units_per_chunk,
                               const std::vector<int64_t>& samples_per_chunk, int64_t window,
                               bool sample_window, uint64_t seed);

// The permutation that sorts `keys` (finite numbers) in increasing order, equal keys in their original order
// (NumPy's argsort(kind="stable"), with -0.0 equal to 0.0): an LSD radix sort of the keys' order-preserving
// bit patterns. Throws std::invalid_argument on a NaN.
std::vector<int64_t> stable_argsort(const double* keys, int64_t n);

}  // namespace cntkio::randomizer
