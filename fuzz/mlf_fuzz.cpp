// Fuzz target of the MLF parser (libFuzzer entry point): the input, written to a memfd, is parsed with and
// without a state list and with a small block (lines crossing blocks). The parse must not crash, and every
// kept entry must be well formed: columns of consistent sizes, offsets ascending, run counts >= 1, ids below
// the dimension, each entry's length the sum of its run counts; a fatal error names a position in the input;
// invalid entries name a line that exists.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "../src/native/mlf.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::mlf;

namespace {

void check_result(const ParseResult& r, int64_t size, int64_t dim) {
  const size_t entries = r.lengths.size();
  check(r.key_offsets.size() == entries + 1 && r.run_offsets.size() == entries + 1);
  check(r.run_states.size() == r.run_counts.size());
  check(r.key_offsets.front() == 0 && r.key_offsets.back() == static_cast<int64_t>(r.key_blob.size()));
  check(r.run_offsets.front() == 0 && r.run_offsets.back() == static_cast<int64_t>(r.run_states.size()));
  for (size_t i = 0; i < entries; ++i) {
    check(r.key_offsets[i + 1] > r.key_offsets[i]);  // keys are never empty
    check(r.run_offsets[i + 1] >= r.run_offsets[i]);
    int64_t frames = 0;  // runs are contiguous from frame 0: the length is the sum of the counts
    for (int64_t k = r.run_offsets[i]; k < r.run_offsets[i + 1]; ++k) {
      check(r.run_counts[static_cast<size_t>(k)] >= 1);
      check(r.run_states[static_cast<size_t>(k)] < dim);
      frames += r.run_counts[static_cast<size_t>(k)];
    }
    check(frames == r.lengths[i]);
  }
  for (const InvalidEntry& e : r.invalid) check(e.line >= 1 && e.line <= r.lines + 1 && !e.reason.empty());
  if (!r.fatal.message.empty()) check(r.fatal.offset >= 0 && r.fatal.offset <= size && r.fatal.line >= 1 && r.fatal.column >= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memory_file("mlf", data, size);
  if (fd < 0) return 0;
  const auto n = static_cast<int64_t>(size);
  for (int variant = 0; variant < 3; ++variant) {
    Options options;
    options.has_states = variant != 1;
    if (options.has_states) options.states = {"s1", "s2", "sil", "a", "b"};
    options.dim = variant == 2 ? 3 : 5;
    options.block_size = variant == 0 ? 256 : 4096;
    const ParseResult r = parse_file(fd, n, options);
    check_result(r, n, options.dim);
  }
  close(fd);
  return 0;
}
