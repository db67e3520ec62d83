// Fuzz target of the native CBF reader (libFuzzer entry point): the input is a CBF file, read from a memory
// file descriptor as the deserializer does: header, chunk table, sequence lengths, then every chunk decoded.
// A malformed file must give a CbfError (never a crash or an out-of-bounds read); a file that decodes must
// give consistent columns: offsets within the arrays, sparse indices in [0, dim) sorted within each sample,
// per-sequence samples at most the sequence's length.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../src/native/cbf.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::cbf;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file("cbf", data, size);
  if (fd < 0) return 0;
  try {
    const Header header = read_header(fd, static_cast<int64_t>(size));
    const std::vector<uint32_t> lengths = read_lengths(fd, header);
    size_t first = 0;
    for (size_t c = 0; c + 1 < header.chunk_offsets.size(); ++c) {
      const std::vector<Column> columns = decode_chunk(fd, header, static_cast<int64_t>(c), lengths.data() + first);
      check(columns.size() == header.streams.size());
      const size_t sequences = header.chunk_sequences[c];
      for (size_t s = 0; s < columns.size(); ++s) {
        const Column& col = columns[s];
        const Stream& stream = header.streams[s];
        const size_t item = stream.is_double ? 8 : 4;
        check(col.seq_offsets.size() == sequences + 1 && col.seq_offsets[0] == 0);
        for (size_t q = 0; q < sequences; ++q) {
          const int64_t samples = col.seq_offsets[q + 1] - col.seq_offsets[q];
          check(samples >= 0 && samples <= static_cast<int64_t>(lengths[first + q]));
        }
        const int64_t total = col.seq_offsets.back();
        if (!stream.sparse) {
          check(col.values.size() == static_cast<size_t>(total) * stream.dim * item);
          continue;
        }
        check(col.indptr.size() == static_cast<size_t>(total) + 1 && col.indptr[0] == 0);
        check(col.indptr.back() == static_cast<int64_t>(col.indices.size()));
        check(col.values.size() == col.indices.size() * item);
        for (int64_t r = 0; r < total; ++r) {
          check(col.indptr[r] <= col.indptr[r + 1]);
          for (int64_t e = col.indptr[r]; e < col.indptr[r + 1]; ++e) {
            check(col.indices[e] >= 0 && static_cast<uint32_t>(col.indices[e]) < stream.dim);
            check(e == col.indptr[r] || col.indices[e - 1] <= col.indices[e]);
          }
        }
      }
      first += sequences;
    }
    check(first == lengths.size());
  } catch (const CbfError&) {
  }
  close(fd);
  return 0;
}
