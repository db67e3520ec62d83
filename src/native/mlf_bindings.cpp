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

using cntkio::bindings::numpy_object;

// mlf_parse's result (cntkio._native.MlfParseResult), read-only. The arrays are made into NumPy arrays once (no
// copy); a property gives the same object on every access.
struct MlfParseResult {
  nb::object key_blob;     // uint8: the keys, back to back
  nb::object key_offsets;  // int64 (entries + 1)
  nb::object run_offsets;  // int64 (entries + 1): entry i's runs are [run_offsets[i], run_offsets[i + 1])
  nb::object run_states;   // uint16 (runs)
  nb::object run_counts;   // uint32 (runs): frames of each run
  nb::object lengths;      // int64 (entries): frames of each entry
  nb::object invalid;      // [(key bytes, line, byte offset, reason, column or 0)]
  nb::object fatal;        // None or (message, byte offset, line, column, key bytes)
  int64_t lines = 0;       // lines read
};

MlfParseResult mlf_parse(int fd, int64_t size, std::optional<std::vector<std::string>> states, int64_t dim,
                         int64_t block) {
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
  MlfParseResult out;
  out.key_blob = numpy_object(std::vector<uint8_t>(r.key_blob.begin(), r.key_blob.end()));
  std::string().swap(r.key_blob);
  out.key_offsets = numpy_object(std::move(r.key_offsets));
  out.run_offsets = numpy_object(std::move(r.run_offsets));
  out.run_states = numpy_object(std::move(r.run_states));
  out.run_counts = numpy_object(std::move(r.run_counts));
  out.lengths = numpy_object(std::move(r.lengths));
  nb::list invalid;
  for (auto& e : r.invalid)
    invalid.append(
        nb::make_tuple(nb::bytes(e.key.data(), e.key.size()), e.line, e.offset, std::move(e.reason), e.column));
  out.invalid = std::move(invalid);
  out.fatal = r.fatal.message.empty()
                  ? nb::none()
                  : nb::object(nb::make_tuple(r.fatal.message, r.fatal.offset, r.fatal.line, r.fatal.column,
                                              nb::bytes(r.fatal.key.data(), r.fatal.key.size())));
  out.lines = r.lines;
  return out;
}

}  // namespace

void bind_mlf(nb::module_& m) {
  nb::class_<MlfParseResult>(m, "MlfParseResult", "The entries of an MLF file (mlf_parse), read-only.")
      .def_ro("key_blob", &MlfParseResult::key_blob, "uint8: the entries' keys, back to back")
      .def_ro("key_offsets", &MlfParseResult::key_offsets, "int64 (entries + 1): key i is key_blob[key_offsets[i]:key_offsets[i+1]]")
      .def_ro("run_offsets", &MlfParseResult::run_offsets, "int64 (entries + 1): entry i's runs are [run_offsets[i], run_offsets[i+1])")
      .def_ro("run_states", &MlfParseResult::run_states, "uint16 (runs): the state (class id) of each run")
      .def_ro("run_counts", &MlfParseResult::run_counts, "uint32 (runs): frames of each run (a run's first frame is the sum of the counts before it in its entry)")
      .def_ro("lengths", &MlfParseResult::lengths, "int64 (entries): frames of each entry")
      .def_ro("invalid", &MlfParseResult::invalid, "entries left out: [(key bytes, line, byte offset of the line or problem, reason, column or 0)]")
      .def_ro("fatal", &MlfParseResult::fatal, "None, or (message, byte offset, line, column, key bytes)")
      .def_ro("lines", &MlfParseResult::lines, "lines read");
  m.def("mlf_parse", &mlf_parse, "fd"_a, "size"_a, "states"_a.none(), "dim"_a, "block"_a = int64_t{4} << 20,
        "Parse bytes [0, size) of the MLF file open as fd (pread in blocks, GIL released). states: the state list "
        "(names; the id is the position) or None (label lines then give an integer class id in column 4). Returns "
        "an MlfParseResult: key_blob uint8 + key_offsets int64 (entries + 1), run_offsets int64 (entries + 1), "
        "run_states uint16 and run_counts uint32 (runs; a run's first frame is the sum of the counts before it in its "
        "entry), lengths int64 (entries), invalid [(key bytes, line, byte offset of the line or problem, reason, "
        "column or 0)], fatal None or (message, byte offset, line, column, key bytes), lines.");
}
