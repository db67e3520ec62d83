// Python binding of the HTK frame reader (htk.hpp), registered into cntkio._native by module.cpp. Arguments are
// checked here; the GIL is released while frames are read, decoded and expanded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "bindings.hpp"
#include "buffer.hpp"
#include "htk.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class T>
using Column = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Vectors = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

template <class T>
nb::object read(const std::vector<cntkio::htk::File>& files, const std::vector<cntkio::htk::Run>& runs, int dim,
                bool compressed, const int64_t* seq_offsets, int64_t sequences, int left, int right, int64_t total) {
  const int64_t width = int64_t{dim} * (1 + left + right);
  cntkio::Buffer<T> out(static_cast<size_t>(total * width));
  {
    nb::gil_scoped_release release;
    bool direct = false;  // float32 frames without a context window: decoded straight into the output
    if constexpr (std::is_same_v<T, float>) direct = left == 0 && right == 0;
    if (direct) {
      cntkio::htk::read_runs(files, runs, dim, compressed, reinterpret_cast<float*>(out.data()));
    } else {
      cntkio::Buffer<float> frames(static_cast<size_t>(total * dim));
      cntkio::htk::read_runs(files, runs, dim, compressed, frames.data());
      cntkio::htk::expand_context<T>(frames.data(), dim, seq_offsets, sequences, left, right, out.data());
    }
  }
  return nb::cast(cntkio::to_numpy(std::move(out), {static_cast<size_t>(total), static_cast<size_t>(width)}));
}

// Frames of a chunk: runs of frames of open HTK files, decoded and expanded. Returns (values, None), or
// (None, (run, offset)) when a file ended before a run (truncated since it was indexed).
nb::tuple htk_read(const Column<int32_t>& fds, const Column<uint8_t>& swap, const Column<int64_t>& data_offsets,
                   const Vectors& scale, const Vectors& bias, bool compressed, int dim, const Column<int32_t>& run_files,
                   const Column<int64_t>& run_first, const Column<int64_t>& run_frames,
                   const Column<int64_t>& seq_offsets, int left, int right, bool as_double) {
  const size_t num_files = fds.shape(0);
  if (swap.shape(0) != num_files || data_offsets.shape(0) != num_files)
    throw nb::value_error("fds, swap and data_offsets must have one entry per file");
  if (dim < 1 || left < 0 || right < 0 || left > (1 << 20) || right > (1 << 20))
    throw nb::value_error("dim must be >= 1 and the context sides in [0, 2**20]");
  if (compressed && (scale.shape(0) != num_files || bias.shape(0) != num_files ||
                     scale.shape(1) != static_cast<size_t>(dim) || bias.shape(1) != static_cast<size_t>(dim)))
    throw nb::value_error("compressed files need scale and bias of shape (files, dim)");
  const size_t num_runs = run_files.shape(0);
  if (run_first.shape(0) != num_runs || run_frames.shape(0) != num_runs)
    throw nb::value_error("run_files, run_first and run_frames must have the same length");
  if (seq_offsets.shape(0) < 1 || seq_offsets(0) != 0) throw nb::value_error("seq_offsets must start with 0");
  const int64_t sequences = static_cast<int64_t>(seq_offsets.shape(0)) - 1;
  for (int64_t s = 0; s < sequences; ++s)
    if (seq_offsets(s + 1) < seq_offsets(s)) throw nb::value_error("seq_offsets must not decrease");
  const int64_t element = compressed ? 2 : 4;
  const int64_t limit = std::numeric_limits<int64_t>::max() / 8;
  std::vector<cntkio::htk::File> files(num_files);
  for (size_t f = 0; f < num_files; ++f) {
    if (fds(f) < 0 || data_offsets(f) < 0) throw nb::value_error("invalid file descriptor or data offset");
    files[f] = {fds(f), data_offsets(f), swap(f) != 0, compressed ? scale.data() + f * dim : nullptr,
                compressed ? bias.data() + f * dim : nullptr};
  }
  std::vector<cntkio::htk::Run> runs(num_runs);
  int64_t total = 0;
  for (size_t r = 0; r < num_runs; ++r) {
    const int32_t file = run_files(r);
    const int64_t first = run_first(r), frames = run_frames(r);
    if (file < 0 || static_cast<size_t>(file) >= num_files) throw nb::value_error("run file out of range");
    if (first < 0 || frames < 0 || first > limit / (element * dim) || frames > limit / (element * dim) - first)
      throw nb::value_error("run frames out of range");
    total += frames;
    if (total > limit / (int64_t{dim} * (1 + left + right))) throw nb::value_error("chunk too large");
    runs[r] = {file, first, frames};
  }
  if (total != seq_offsets(static_cast<size_t>(sequences)))
    throw nb::value_error("the runs' frames must add up to the last sequence offset");
  try {
    nb::object values = as_double ? read<double>(files, runs, dim, compressed, seq_offsets.data(), sequences, left,
                                                 right, total)
                                  : read<float>(files, runs, dim, compressed, seq_offsets.data(), sequences, left,
                                                right, total);
    return nb::make_tuple(values, nb::none());
  } catch (const cntkio::htk::ShortData& e) {
    return nb::make_tuple(nb::none(), nb::make_tuple(e.run, e.offset));
  }
}

// Frames (total x dim float32) expanded by a context window within each sequence, as float32 or float64.
nb::object htk_expand(const nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>& frames,
                      const Column<int64_t>& seq_offsets, int left, int right, bool as_double) {
  const int64_t total = static_cast<int64_t>(frames.shape(0));
  const int dim = static_cast<int>(frames.shape(1));
  if (dim < 1 || left < 0 || right < 0 || left > (1 << 20) || right > (1 << 20))
    throw nb::value_error("frames must have >= 1 column and the context sides be in [0, 2**20]");
  if (seq_offsets.shape(0) < 1 || seq_offsets(0) != 0) throw nb::value_error("seq_offsets must start with 0");
  const int64_t sequences = static_cast<int64_t>(seq_offsets.shape(0)) - 1;
  for (int64_t s = 0; s < sequences; ++s)
    if (seq_offsets(s + 1) < seq_offsets(s)) throw nb::value_error("seq_offsets must not decrease");
  if (seq_offsets(static_cast<size_t>(sequences)) != total) throw nb::value_error("seq_offsets must end at the frames");
  const int64_t width = int64_t{dim} * (1 + left + right);
  auto expand = [&](auto* tag) -> nb::object {
    using T = std::remove_pointer_t<decltype(tag)>;
    cntkio::Buffer<T> out(static_cast<size_t>(total * width));
    {
      nb::gil_scoped_release release;
      cntkio::htk::expand_context<T>(frames.data(), dim, seq_offsets.data(), sequences, left, right, out.data());
    }
    return nb::cast(cntkio::to_numpy(std::move(out), {static_cast<size_t>(total), static_cast<size_t>(width)}));
  };
  return as_double ? expand(static_cast<double*>(nullptr)) : expand(static_cast<float*>(nullptr));
}

}  // namespace

void bind_htk(nb::module_& m) {
  m.def("htk_expand", &htk_expand, "frames"_a, "seq_offsets"_a, "left"_a, "right"_a, "as_double"_a,
        "Frames expanded by a context window within each sequence (edge frames repeated).");
  m.def("htk_read", &htk_read, "fds"_a, "swap"_a, "data_offsets"_a, "scale"_a, "bias"_a, "compressed"_a, "dim"_a,
        "run_files"_a, "run_first"_a, "run_frames"_a, "seq_offsets"_a, "left"_a, "right"_a, "as_double"_a,
        "Frames of HTK files (runs of frames, in order) decoded and expanded by a context window: "
        "(values, None), or (None, (run, offset)) if a file ended early.");
}
