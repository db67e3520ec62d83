// Python bindings of the MLF (master label file) parser (mlf.hpp), registered into cntkio._native by module.cpp.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_mlf(nb::module_& m) { (void)m; }
