// Python bindings of the CBF (CNTK binary format) reader and writer (cbf.hpp), registered into cntkio._native by
// module.cpp: CbfFile reads a file's header and tables, then decodes chunks on request; cbf_encode writes the blocks
// of a chunk's sequences. The GIL is released while bytes are read, decoded and encoded.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "cbf.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::bindings;

namespace {

nb::handle cbf_error_type;  // cntkio._native.CbfError(ValueError), args (message, offset, chunk, sequence, stream)

[[noreturn]] void raise_cbf(const cbf::CbfError& e) {
  nb::object args = nb::make_tuple(e.what(), e.offset, e.chunk, e.sequence, e.stream);
  PyErr_SetObject(cbf_error_type.ptr(), args.ptr());
  throw nb::python_error();
}

// A CBF file open as `fd` (owned by the caller): its header, chunk table and sequence lengths are read
// at construction; chunks are decoded on request (GIL released).
class CbfFile {
 public:
  CbfFile(int fd, int64_t size) : fd_(fd) {
    std::optional<cbf::CbfError> failure;
    {
      nb::gil_scoped_release release;
      try {
        header_ = cbf::read_header(fd, size);
        lengths_ = cbf::read_lengths(fd, header_);
        first_sequence_.assign(1, 0);
        for (const uint32_t n : header_.chunk_sequences) first_sequence_.push_back(first_sequence_.back() + n);
      } catch (const cbf::CbfError& e) {
        failure = e;
      }
    }
    if (failure) raise_cbf(*failure);
  }

  nb::list streams() const {
    nb::list out;
    for (const cbf::Stream& s : header_.streams) out.append(nb::make_tuple(s.name, s.sparse, s.is_double, s.dim));
    return out;
  }

  nb::tuple chunks() const {
    std::vector<int64_t> offsets(header_.chunk_offsets), sequences, samples;
    for (const uint32_t n : header_.chunk_sequences) sequences.push_back(n);
    for (const uint32_t n : header_.chunk_samples) samples.push_back(n);
    return nb::make_tuple(to_numpy(std::move(offsets)), to_numpy(std::move(sequences)), to_numpy(std::move(samples)));
  }

  nb::ndarray<nb::numpy, uint32_t> lengths() const { return to_numpy(std::vector<uint32_t>(lengths_)); }

  // Per stream (values, seq_offsets, indices or None, indptr or None); dense values are (samples, dim).
  nb::list decode(int64_t chunk) const {
    if (chunk < 0 || chunk >= static_cast<int64_t>(header_.chunk_sequences.size())) throw nb::index_error("chunk out of range");
    std::vector<cbf::Column> columns;
    std::optional<cbf::CbfError> failure;
    std::string io_failure;
    {
      nb::gil_scoped_release release;
      try {
        columns = cbf::decode_chunk(fd_, header_, chunk, lengths_.data() + first_sequence_[chunk]);
      } catch (const cbf::CbfError& e) {
        failure = e;
      } catch (const std::runtime_error& e) {
        io_failure = e.what();
      }
    }
    if (failure) raise_cbf(*failure);
    if (!io_failure.empty()) throw std::runtime_error(io_failure);
    nb::list out;
    for (size_t s = 0; s < columns.size(); ++s) {
      const cbf::Stream& stream = header_.streams[s];
      cbf::Column& c = columns[s];
      nb::dlpack::dtype dtype = stream.is_double ? nb::dtype<double>() : nb::dtype<float>();
      const size_t item = stream.is_double ? 8 : 4;
      if (stream.sparse) {
        const size_t nnz = c.values.size() / item;
        out.append(nb::make_tuple(bytes_to_numpy(std::move(c.values), dtype, {nnz}), to_numpy(std::move(c.seq_offsets)),
                                  to_numpy(std::move(c.indices)), to_numpy(std::move(c.indptr))));
      } else {
        const size_t samples = c.values.size() / (item * stream.dim);
        out.append(nb::make_tuple(bytes_to_numpy(std::move(c.values), dtype, {samples, static_cast<size_t>(stream.dim)}),
                                  to_numpy(std::move(c.seq_offsets)), nb::none(), nb::none()));
      }
    }
    return out;
  }

 private:
  int fd_;
  cbf::Header header_;
  std::vector<uint32_t> lengths_;
  std::vector<int64_t> first_sequence_;  // of each chunk, in lengths_
};

// The CBF blocks of sequences [first, last) of every stream of a chunk: per stream
// (values, seq_offsets, indices or None, indptr or None); returns one uint8 array per stream.
nb::list cbf_encode(const nb::list& columns, int64_t first, int64_t last) {
  struct Input {
    bool sparse;
    int64_t dim, itemsize;
    const char* values;
    const int32_t* indices;
    const int64_t* indptr;
    const int64_t* seq_offsets;
  };
  std::vector<Input> inputs;
  for (size_t s = 0; s < nb::len(columns); ++s) {
    nb::tuple column = nb::cast<nb::tuple>(columns[s]);
    const std::string name = "stream " + std::to_string(s);
    AnyArray values = exact_array<AnyArray>(column[0], name + " values");
    OffsetArray seq_offsets = exact_array<OffsetArray>(column[1], name + " sequence offsets (int64)");
    const size_t item = values.itemsize();
    if (values.dtype().code != static_cast<uint8_t>(nb::dlpack::dtype_code::Float) || (item != 4 && item != 8))
      throw nb::value_error((name + ": values must be float32 or float64").c_str());
    if (first < 0 || last < first || last >= static_cast<int64_t>(seq_offsets.shape(0)))
      throw nb::value_error((name + ": sequence range outside the chunk").c_str());
    Input in{false, 0, static_cast<int64_t>(item), static_cast<const char*>(values.data()), nullptr, nullptr,
             seq_offsets.data()};
    const int64_t samples = seq_offsets.data()[seq_offsets.shape(0) - 1];
    if (column[2].is_none()) {
      if (values.ndim() != 2) throw nb::value_error((name + ": dense values must be (samples, dim)").c_str());
      in.dim = static_cast<int64_t>(values.shape(1));
      if (static_cast<int64_t>(values.shape(0)) < samples) throw nb::value_error((name + ": fewer rows than samples").c_str());
    } else {
      IndexArray indices = exact_array<IndexArray>(column[2], name + " indices (int32)");
      OffsetArray indptr = exact_array<OffsetArray>(column[3], name + " indptr (int64)");
      in.sparse = true;
      in.indices = indices.data();
      in.indptr = indptr.data();
      if (static_cast<int64_t>(indptr.shape(0)) < samples + 1 || indices.shape(0) != values.shape(0) ||
          indptr.data()[samples] > static_cast<int64_t>(values.shape(0)))
        throw nb::value_error((name + ": malformed CSR arrays").c_str());
    }
    for (int64_t q = first; q < last; ++q) {
      if (seq_offsets.data()[q + 1] < seq_offsets.data()[q]) throw nb::value_error((name + ": sequence offsets decrease").c_str());
    }
    inputs.push_back(in);
  }
  std::vector<std::vector<char>> blocks(inputs.size());
  {
    nb::gil_scoped_release release;
    for (size_t s = 0; s < inputs.size(); ++s) {
      const Input& in = inputs[s];
      cbf::encode_stream(blocks[s], in.sparse, in.dim, in.itemsize, in.values, in.indices, in.indptr, in.seq_offsets,
                         first, last);
    }
  }
  nb::list out;
  for (auto& block : blocks) {
    const size_t size = block.size();
    out.append(bytes_to_numpy(std::move(block), nb::dtype<uint8_t>(), {size}));
  }
  return out;
}

}  // namespace

void bind_cbf(nb::module_& m) {
  cbf_error_type = nb::exception<cbf::CbfError>(m, "CbfError", PyExc_ValueError);
  nb::class_<CbfFile>(m, "CbfFile")
      .def(nb::init<int, int64_t>(), "fd"_a, "size"_a)
      .def("streams", &CbfFile::streams)
      .def("chunks", &CbfFile::chunks)
      .def("lengths", &CbfFile::lengths)
      .def("decode", &CbfFile::decode, "chunk"_a);
  m.def("cbf_encode", &cbf_encode, "columns"_a, "first"_a, "last"_a,
        "CBF stream blocks of sequences [first, last) of a chunk's columns, one uint8 array per stream.");
}
