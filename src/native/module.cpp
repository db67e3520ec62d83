// The native module cntkio._native: its initialisation only. Each area's bindings live in its *_bindings.cpp (the
// CTF indexer and parser, CBF, key join, randomization, chunk store and gather, record framing, MLF, SCP, HTK,
// Kaldi, image maps and pixels), registered here. Every entry point checks its arguments; the GIL is released while
// the byte-level loops run.
#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "file_io.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "Native core of cntkio: CTF indexer and parser, minibatch assembly, CNTK block randomization.";
  bind_records(m);
  bind_mlf(m);
  bind_scp(m);
  bind_htk(m);
  bind_kaldi(m);
  bind_image_index(m);
  bind_image_pixels(m);
  bind_cbf(m);
  nb::exception<cntkio::ShortRead>(m, "ShortRead", PyExc_EOFError);  // a file ended before a read (file_io.hpp)
  m.def(
      "release_range",
      [](int fd, int64_t offset, int64_t size) {
        if (offset < 0 || size < 0) throw nb::value_error("release_range: offset and size must be >= 0");
        const int error = cntkio::release_range(fd, offset, size);
        if (error != 0) throw std::runtime_error(std::string("release_range: ") + std::strerror(error));
      },
      nb::arg("fd"), nb::arg("offset"), nb::arg("size"),
      "Free the disk blocks of bytes [offset, offset + size) of the file open as fd, keeping its size (staging files "
      "of remote data); does nothing where holes cannot be punched.");
  bind_ctf(m);
  bind_keys(m);
  bind_order(m);
  bind_store(m);
}
