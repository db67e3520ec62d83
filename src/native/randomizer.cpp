// CNTK-compatible block randomization; see randomization-and-packing.md section 3.
#include "randomizer.hpp"

#include <algorithm>
#include <cmath>
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

namespace {

// NumPy's SeedSequence with the default pool of four 32-bit words, for entropy given as 64-bit integers (each
// becomes its 32-bit words, least significant first, at least one), and the state words it generates.
class SeedSequence {
 public:
  explicit SeedSequence(std::initializer_list<uint64_t> values) {
    std::vector<uint32_t> entropy;
    for (uint64_t value : values) {
      do {
        entropy.push_back(static_cast<uint32_t>(value));
        value >>= 32;
      } while (value != 0);
    }
    uint32_t hash_const = kInitA;
    auto hashmix = [&hash_const](uint32_t value) {
      value ^= hash_const;
      hash_const *= kMultA;
      value *= hash_const;
      value ^= value >> kShift;
      return value;
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t result = kMixL * x - kMixR * y;
      return result ^ (result >> kShift);
    };
    for (size_t i = 0; i < kPool; ++i) pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
    for (size_t source = 0; source < kPool; ++source) {
      for (size_t target = 0; target < kPool; ++target) {
        if (source != target) pool_[target] = mix(pool_[target], hashmix(pool_[source]));
      }
    }
    for (size_t source = kPool; source < entropy.size(); ++source) {
      for (size_t target = 0; target < kPool; ++target) pool_[target] = mix(pool_[target], hashmix(entropy[source]));
    }
  }

  // generate_state(words / 2, uint64): 64-bit words made of consecutive 32-bit words, the first the low half.
  void generate64(uint64_t* out, size_t count) const {
    uint32_t hash_const = kInitB;
    for (size_t i = 0; i < 2 * count; ++i) {
      uint32_t value = pool_[i % kPool];
      value ^= hash_const;
      hash_const *= kMultB;
      value *= hash_const;
      value ^= value >> kShift;
      if (i % 2 == 0) {
        out[i / 2] = value;
      } else {
        out[i / 2] |= static_cast<uint64_t>(value) << 32;
      }
    }
  }

 private:
  static constexpr size_t kPool = 4;
  static constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
  static constexpr uint32_t kMixL = 0xca01f9dd, kMixR = 0x4973f715;
  static constexpr int kShift = 16;
  uint32_t pool_[kPool] = {};
};

// NumPy's PCG64 (128-bit LCG, XSL-RR output) seeded from a SeedSequence as NumPy seeds it.
class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seq) {
    uint64_t words[4];
    seq.generate64(words, 4);
    const unsigned __int128 initstate = (static_cast<unsigned __int128>(words[0]) << 64) | words[1];
    const unsigned __int128 initseq = (static_cast<unsigned __int128>(words[2]) << 64) | words[3];
    state_ = 0;
    inc_ = (initseq << 1) | 1;
    step();
    state_ += initstate;
    step();
  }

  uint64_t next64() {
    step();
    const uint64_t mixed = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rotation = static_cast<unsigned>(state_ >> 122);
    return (mixed >> rotation) | (mixed << ((64 - rotation) & 63));
  }

  // Generator.random(): 53 random bits in [0, 1).
  double next_double() { return static_cast<double>(next64() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  void step() { state_ = state_ * kMultiplier + inc_; }
  static constexpr unsigned __int128 kMultiplier =
      (static_cast<unsigned __int128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
  unsigned __int128 state_ = 0, inc_ = 0;
};

}  // namespace

std::vector<double> default_unit_keys(uint64_t seed, uint64_t sweep, const int64_t* chunks, const int64_t* counts,
                                      const double* starts, int64_t n, double window) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += counts[i];
  std::vector<double> keys(static_cast<size_t>(total));
  size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    Pcg64 generator(SeedSequence{seed, sweep, static_cast<uint64_t>(chunks[i])});
    const double end = starts[i] + window;
    const double below = std::nextafter(end, -INFINITY);  // start + window * u may round up to the end
    for (int64_t u = 0; u < counts[i]; ++u) keys[at++] = std::min(starts[i] + window * generator.next_double(), below);
  }
  return keys;
}

}  // namespace cntkio::randomizer
