// Python bindings of the record framing (records.hpp), registered into cntkio._native by module.cpp.
// Arguments are checked here; the GIL is released while files are walked and CRCs computed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <vector>

#include "bindings.hpp"
#include "records.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio::records;
using cntkio::bindings::OffsetArray;

namespace {

Framing to_framing(int framing) {
  if (framing != 0 && framing != 1) throw nb::value_error("framing must be 0 (length-prefixed) or 1 (TFRecord)");
  return static_cast<Framing>(framing);
}

nb::tuple records_walk(int fd, int64_t begin, int64_t end, int framing, int64_t block) {
  const Framing f = to_framing(framing);
  if (fd < 0) throw nb::value_error("invalid file descriptor");
  if (begin < 0 || end < begin) throw nb::value_error("invalid byte range");
  if (block < 64 || block > (int64_t{1} << 30)) throw nb::value_error("block must be in [64, 2**30]");
  WalkResult r;
  {
    nb::gil_scoped_release release;
    r = walk_file(fd, begin, end, f, block);
  }
  return nb::make_tuple(cntkio::to_numpy(std::move(r.starts)), r.error, r.error_offset);
}

nb::ndarray<nb::numpy, int64_t> records_bad_crcs(nb::bytes buffer, OffsetArray starts) {
  const auto* data = reinterpret_cast<const uint8_t*>(buffer.c_str());
  const auto size = static_cast<int64_t>(buffer.size());
  const auto n = static_cast<int64_t>(starts.shape(0));
  std::vector<int64_t> bad;
  {
    nb::gil_scoped_release release;
    bad = bad_data_crcs(data, size, starts.data(), n);
  }
  return cntkio::to_numpy(std::move(bad));
}

// Any C-contiguous bytes-like object (bytes, bytearray, memoryview, a uint8 array), read without a copy.
uint32_t records_crc32c(nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> data, uint32_t crc,
                        bool portable) {
  const uint8_t* p = data.data();
  const size_t size = data.shape(0);
  nb::gil_scoped_release release;
  return portable ? crc32c_portable(p, size, crc) : crc32c(p, size, crc);
}

}  // namespace

void bind_records(nb::module_& m) {
  m.def("records_walk", &records_walk, "fd"_a, "begin"_a, "end"_a, "framing"_a, "block"_a = int64_t{1} << 20,
        "Walk the length-prefixed (framing 0) or TFRecord (1) records of bytes [begin, end) of the file open as fd, "
        "reading it with pread (GIL released): (header offsets int64, error or '', offset of the record the error "
        "is about or -1). TFRecord length CRCs are checked; data CRCs are not.");
  m.def("records_bad_crcs", &records_bad_crcs, "buffer"_a, "starts"_a,
        "Positions of the TFRecords (headers at `starts` in `buffer`) whose data CRC does not match (GIL released).");
  m.def("crc32c", &records_crc32c, "data"_a, "crc"_a = 0u, "portable"_a = false,
        "CRC-32C (Castagnoli) of data, continuing from crc; portable=True forces the table implementation.");
}
