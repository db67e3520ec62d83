// The native module cntkio._native: its initialisation only. Each area's bindings live in its *_bindings.cpp (the
// CTF indexer and parser, CBF, key join, randomization, chunk store and gather, record framing, MLF, SCP, HTK,
// Kaldi, image maps and pixels), registered here. Every entry point checks its arguments; the GIL is released while
// the byte-level loops run.
#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "file_io.hpp"

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
  bind_ctf(m);
  bind_keys(m);
  bind_order(m);
  bind_store(m);
}
