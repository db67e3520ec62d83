// Fuzz target of the HTK frame reader (libFuzzer entry point): the first bytes choose the layout (dimension,
// compressed or float32 data, byte swap, data offset, context window) and runs of frames; the rest of the input,
// in a memfd, is the file. Reading must not crash: every run inside the file is decoded (compressed values from
// finite A/B vectors stay finite), and a run past the end is a ShortData error naming that run and an offset
// no further than where the run starts.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "../src/native/htk.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::htk;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in{data, size};
  const int dim = 1 + static_cast<int>(in.next(6));
  const bool compressed = in.next(2) != 0;
  File file;
  file.swap = in.next(2) != 0;
  file.data_offset = in.next(32);
  const int left = static_cast<int>(in.next(3)), right = static_cast<int>(in.next(3));
  const int64_t element = compressed ? 2 : 4;
  std::vector<float> scale(static_cast<size_t>(dim)), bias(static_cast<size_t>(dim));
  for (int k = 0; k < dim; ++k) {
    scale[static_cast<size_t>(k)] = 1.0f + static_cast<float>(in.next(200));
    bias[static_cast<size_t>(k)] = static_cast<float>(in.next(200)) - 100.0f;
  }
  file.scale = scale.data();
  file.bias = bias.data();
  std::vector<Run> runs(1 + in.next(4));
  std::vector<int64_t> seq_offsets{0};
  for (Run& run : runs) {
    run.first_frame = in.next(16);
    run.frames = in.next(8);
    seq_offsets.push_back(seq_offsets.back() + run.frames);  // one sequence per run
  }
  const int fd = memory_file("htk", data + in.at, size - in.at);
  if (fd < 0) return 0;
  file.fd = fd;
  const int64_t file_size = static_cast<int64_t>(size - in.at);
  const int64_t total = seq_offsets.back();
  std::vector<float> frames(static_cast<size_t>(total * dim));
  bool complete = true;
  for (const Run& run : runs) {
    complete = complete && (run.frames == 0 || file.data_offset + (run.first_frame + run.frames) * dim * element <= file_size);
  }
  try {
    read_runs({file}, runs, dim, compressed, frames.data());
    check(complete);
    if (compressed) {
      for (const float v : frames) check(std::isfinite(v));
    }
    const int64_t width = int64_t{dim} * (1 + left + right);
    std::vector<double> out(static_cast<size_t>(total * width));
    expand_context<double>(frames.data(), dim, seq_offsets.data(), static_cast<int64_t>(runs.size()), left, right,
                           out.data());
    for (int64_t t = 0; t < total; ++t) {  // the centre block is the frame itself
      for (int k = 0; k < dim; ++k) {
        const float v = frames[static_cast<size_t>(t * dim + k)];
        const double centre = out[static_cast<size_t>(t * width + left * dim + k)];
        check(std::isnan(v) ? std::isnan(centre) : centre == static_cast<double>(v));
      }
    }
  } catch (const ShortData& e) {
    check(!complete && e.run >= 0 && e.run < static_cast<int64_t>(runs.size()));
    check(e.offset >= 0 && e.offset <= std::max(file_size, file.data_offset + 16 * dim * element));
  }
  close(fd);
  return 0;
}
