// Python bindings of the randomization (randomizer.hpp), registered into cntkio._native by module.cpp: CNTK's
// BlockRandomizer order of a sweep, the keys of cntkio's default order and the stable radix argsort that orders
// them, each with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "randomizer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::bindings;

namespace {

nb::tuple compat_order(const std::vector<int64_t>& units_per_chunk, const std::vector<int64_t>& samples_per_chunk,
                       int64_t window, bool sample_window, uint64_t seed) {
  if (units_per_chunk.size() != samples_per_chunk.size()) throw nb::value_error("chunk lists differ in length");
  if (units_per_chunk.empty()) throw nb::value_error("no chunks");
  for (size_t i = 0; i < units_per_chunk.size(); ++i) {
    if (units_per_chunk[i] <= 0 || samples_per_chunk[i] < 0) throw nb::value_error("a chunk has no units");
  }
  if (window < 0) throw nb::value_error("window must be >= 0");
  randomizer::CompatOrder r;
  {
    nb::gil_scoped_release release;
    r = randomizer::compat_block_order(units_per_chunk, samples_per_chunk, window, sample_window, seed);
  }
  return nb::make_tuple(to_numpy(std::move(r.units)), to_numpy(std::move(r.chunk_order)),
                        to_numpy(std::move(r.window_begin)), to_numpy(std::move(r.window_end)));
}


nb::ndarray<nb::numpy, int64_t> stable_argsort(F64Array keys) {
  std::vector<int64_t> order;
  std::string error;
  {
    nb::gil_scoped_release release;
    try {
      order = randomizer::stable_argsort(keys.data(), static_cast<int64_t>(keys.shape(0)));
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
  }
  if (!error.empty()) throw nb::value_error(error.c_str());
  return to_numpy(std::move(order));
}

nb::ndarray<nb::numpy, double> default_unit_keys(uint64_t seed, uint64_t sweep, OffsetArray chunks, OffsetArray counts,
                                                 F64Array starts, double window) {
  const size_t n = chunks.shape(0);
  if (counts.shape(0) != n || starts.shape(0) != n) throw nb::value_error("chunks, counts and starts differ in length");
  for (size_t i = 0; i < n; ++i) {
    if (chunks.data()[i] < 0 || counts.data()[i] < 0) throw nb::value_error("chunks and counts must be >= 0");
  }
  std::vector<double> keys;
  {
    nb::gil_scoped_release release;
    keys = randomizer::default_unit_keys(seed, sweep, chunks.data(), counts.data(), starts.data(),
                                         static_cast<int64_t>(n), window);
  }
  return to_numpy(std::move(keys));
}

}  // namespace

void bind_order(nb::module_& m) {
  m.def("compat_block_order", &compat_order, "units_per_chunk"_a, "samples_per_chunk"_a, "window"_a,
        "sample_window"_a, "seed"_a,
        "CNTK's BlockRandomizer order of one sweep (MT19937-64): (units, chunk_order, window_begin, window_end).");
  m.def("default_unit_keys", &default_unit_keys, "seed"_a, "sweep"_a, "chunks"_a, "counts"_a, "starts"_a, "window"_a,
        "Keys of the default randomization: start + window * default_rng([seed, sweep, chunk]).random(count) of each "
        "chunk, kept below start + window, concatenated (float64).");
  m.def("stable_argsort", &stable_argsort, "keys"_a,
        "The permutation sorting float64 keys, equal keys in their order (argsort(kind='stable')), by radix sort.");
}
