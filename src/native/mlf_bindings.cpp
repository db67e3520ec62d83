// Python bindings of the MLF (master label file) parser (mlf.hpp), registered into cntkio._native by module.cpp.
// Arguments are checked here; the GIL is released while the file is parsed. The columns are handed to NumPy
// without a copy (each array owns its vector).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "mlf.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

nb::dict mlf_parse(int fd, int64_t size, std::optional<std::vector<std::string>> states, int64_t dim, int64_t block) {
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (size < 0) throw nb::value_error("size must be >= 0");
  if (block < 256 || block > (int64_t{1} << 30)) throw nb::value_error("block must be in [256, 2**30]");
  cntkio::mlf::Options options;
  options.has_states = states.has_value();
  if (states) options.states = std::move(*states);
  options.dim = dim;
  options.block_size = block;
  cntkio::mlf::ParseResult r;
  {
    nb::gil_scoped_release release;
    r = cntkio::mlf::parse_file(fd, size, options);
  }
  nb::dict d;
  d["key_blob"] = cntkio::to_numpy(std::vector<uint8_t>(r.key_blob.begin(), r.key_blob.end()));
  std::string().swap(r.key_blob);
  d["key_offsets"] = cntkio::to_numpy(std::move(r.key_offsets));
  d["run_offsets"] = cntkio::to_numpy(std::move(r.run_offsets));
  d["run_states"] = cntkio::to_numpy(std::move(r.run_states));
  d["run_counts"] = cntkio::to_numpy(std::move(r.run_counts));
  d["lengths"] = cntkio::to_numpy(std::move(r.lengths));
  nb::list invalid;
  for (auto& e : r.invalid)
    invalid.append(
        nb::make_tuple(nb::bytes(e.key.data(), e.key.size()), e.line, e.offset, std::move(e.reason), e.column));
  d["invalid"] = invalid;
  d["fatal"] = r.fatal.message.empty()
                   ? nb::none()
                   : nb::object(nb::make_tuple(r.fatal.message, r.fatal.offset, r.fatal.line, r.fatal.column,
                                               nb::bytes(r.fatal.key.data(), r.fatal.key.size())));
  d["lines"] = r.lines;
  return d;
}

}  // namespace

void bind_mlf(nb::module_& m) {
  m.def("mlf_parse", &mlf_parse, "fd"_a, "size"_a, "states"_a.none(), "dim"_a, "block"_a = int64_t{4} << 20,
        "Parse bytes [0, size) of the MLF file open as fd (pread in blocks, GIL released). states: the state list "
        "(names; the id is the position) or None (label lines then give an integer class id in column 4). Returns "
        "a dict: key_blob uint8 + key_offsets int64 (entries + 1), run_offsets int64 (entries + 1), run_states "
        "uint16 and run_counts uint32 (runs; a run's first frame is the sum of the counts before it in its entry), "
        "lengths int64 (entries), invalid [(key bytes, line, byte offset of the line or problem, reason, column or 0)], fatal None or (message, byte offset, line, "
        "column, key bytes), lines.");
}
