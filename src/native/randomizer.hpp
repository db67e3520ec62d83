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

// The keys of the default randomization (cntkio/order.py) of `n` chunks: chunk i (table chunk `chunks[i]`, with
// `counts[i]` units and randomized start `starts[i]`) gives its units start + window * u, u from NumPy's
// default_rng([seed, sweep, chunks[i]]).random(counts[i]), each kept below start + window; concatenated in order.
// NumPy's SeedSequence (a pool of four 32-bit words) and PCG64 are reproduced exactly, so the order is the one
// NumPy would give, at a fraction of the cost of a Generator per chunk.
std::vector<double> default_unit_keys(uint64_t seed, uint64_t sweep, const int64_t* chunks, const int64_t* counts,
                                      const double* starts, int64_t n, double window);

}  // namespace cntkio::randomizer
