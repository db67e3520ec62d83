// CNTK-compatible block randomization; see randomization-and-packing.md section 3.
#include "randomizer.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <random>
#include <utility>

namespace cntkio::randomizer {

namespace {

void compute_chunk_windows(const std::vector<int64_t>& samples, int64_t window, bool sample_window,
                           std::vector<int64_t>& begin, std::vector<int64_t>& end) {
  const int64_t chunks = static_cast<int64_t>(samples.size());
  begin.assign(chunks, 0);
  end.assign(chunks, 0);
  if (!sample_window) {
    const int64_t size = std::max<int64_t>(window, 1);
    const int64_t half = size / 2;
    for (int64_t k = 0; k < chunks; ++k) {
      int64_t b = k > half ? k - half : 0;
      int64_t e = b + size;
      if (e > chunks) {
        e = chunks;
        b = std::max<int64_t>(0, chunks - size);
      }
      begin[k] = b;
      end[k] = e;
    }
    return;
  }
  std::vector<int64_t> start(chunks + 1, 0);
  for (int64_t k = 0; k < chunks; ++k) start[k + 1] = start[k] + samples[k];
  const int64_t half = window / 2;
  int64_t b = 0, e = 1;
  for (int64_t k = 0; k < chunks; ++k) {
    while (start[k] - start[b] > half) ++b;
    b = std::min(b, k);
    e = std::max(e, k + 1);
    while (e < chunks && start[e + 1] - start[k] < half) ++e;
    begin[k] = b;
    end[k] = e;
  }
}

}  // namespace

CompatOrder compat_block_order(const std::vector<int64_t>& units_per_chunk,
                               const std::vector<int64_t>& samples_per_chunk, int64_t window,
                               bool sample_window, uint64_t seed) {
  const int64_t chunks = static_cast<int64_t>(units_per_chunk.size());
  CompatOrder result;
  std::mt19937_64 rng;

  // 3.1: naive chunk shuffle.
  result.chunk_order.resize(chunks);
  for (int64_t k = 0; k < chunks; ++k) result.chunk_order[k] = k;
  rng.seed(seed);
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(chunks));
    std::swap(result.chunk_order[i], result.chunk_order[j]);
  }

  // 3.2: windows over randomized positions.
  std::vector<int64_t> randomized_samples(chunks);
  for (int64_t k = 0; k < chunks; ++k) randomized_samples[k] = samples_per_chunk[result.chunk_order[k]];
  compute_chunk_windows(randomized_samples, window, sample_window, result.window_begin, result.window_end);

  // Units laid out in randomized chunk order; remember each one's home position and position range.
  std::vector<int64_t> first_unit(chunks + 1, 0);
  for (int64_t c = 0; c < chunks; ++c) first_unit[c + 1] = first_unit[c] + units_per_chunk[c];
  std::vector<int64_t> position_start(chunks + 1, 0);
  for (int64_t k = 0; k < chunks; ++k) position_start[k + 1] = position_start[k] + units_per_chunk[result.chunk_order[k]];
  const int64_t total = position_start[chunks];
  result.units.resize(total);
  std::vector<int64_t> home(total), chunk_at(total);
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t c = result.chunk_order[k];
    for (int64_t i = 0; i < units_per_chunk[c]; ++i) {
      const int64_t t = position_start[k] + i;
      result.units[t] = first_unit[c] + i;
      home[t] = k;
      chunk_at[t] = k;
    }
  }

  // 3.3: windowed swaps, re-seeded with the sweep seed.
  rng.seed(seed);
  auto in_window = [&](int64_t chunk_position, int64_t k) {
    return result.window_begin[k] <= chunk_position && chunk_position < result.window_end[k];
  };
  for (int64_t t = 0; t < total; ++t) {
    const int64_t k = chunk_at[t];
    const int64_t lo = position_start[result.window_begin[k]];
    const int64_t hi = position_start[result.window_end[k]];
    while (true) {
      const int64_t j = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo));
      if (in_window(home[j], k) && in_window(home[t], chunk_at[j])) {
        std::swap(result.units[t], result.units[j]);
        std::swap(home[t], home[j]);
        break;
      }
    }
  }
  return result;
}

std::vector<int64_t> stable_argsort(const double* keys, int64_t n) {
  std::vector<uint64_t> bits(static_cast<size_t>(n)), bits_out(static_cast<size_t>(n));
  std::vector<int64_t> order(static_cast<size_t>(n)), order_out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double key = keys[i] == 0.0 ? 0.0 : keys[i];  // -0.0 sorts as 0.0
    if (key != key) throw std::invalid_argument("a sort key is NaN");
    uint64_t b;
    std::memcpy(&b, &key, sizeof b);
    bits[i] = (b >> 63) ? ~b : (b | (uint64_t{1} << 63));  // increasing as the numbers increase
    order[i] = i;
  }
  if (n < 4096) {  // small: a comparison sort beats clearing 65536 counters per pass
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return bits[a] < bits[b]; });
    return order;
  }
  constexpr int kDigitBits = 16;
  std::vector<int64_t> counts(size_t{1} << kDigitBits);
  for (int shift = 0; shift < 64; shift += kDigitBits) {
    std::fill(counts.begin(), counts.end(), 0);
    for (int64_t i = 0; i < n; ++i) ++counts[(bits[i] >> shift) & 0xFFFF];
    if (n == 0 || counts[(bits[0] >> shift) & 0xFFFF] == n) continue;  // every key has this digit
    int64_t total = 0;
    for (int64_t& c : counts) {
      const int64_t here = c;
      c = total;
      total += here;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = counts[(bits[i] >> shift) & 0xFFFF]++;
      bits_out[at] = bits[i];
      order_out[at] = order[i];
    }
    bits.swap(bits_out);
    order.swap(order_out);
  }
  return order;
}

}  // namespace cntkio::randomizer
