// Python bindings of the record framing (records.hpp), registered into cntkio._native by module.cpp.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_records(nb::module_& m) { (void)m; }
