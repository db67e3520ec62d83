// HTK frame reading and context expansion (htk.hpp).
#include "htk.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "file_io.hpp"

namespace cntkio::htk {
namespace {

constexpr int64_t kStagingBytes = int64_t{1} << 20;  // compressed data is decoded through this buffer

void swap_floats(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    bits = __builtin_bswap32(bits);
    std::memcpy(values + i, &bits, 4);
  }
}

// Reads `size` bytes at `offset` of run `run`; a short read is a ShortData error.
void read_run_bytes(int fd, int64_t offset, int64_t size, char* out, int64_t run) {
  const int64_t done = read_some(fd, offset, size, out);
  if (done < size) throw ShortData(run, offset + done);
}

void read_compressed(const File& file, const Run& run, int64_t run_index, int dim, float* out) {
  thread_local std::unique_ptr<char[]> staging(new char[kStagingBytes]);
  const int64_t frame_bytes = int64_t{2} * dim;
  const int64_t frames_per_read = std::max<int64_t>(1, kStagingBytes / frame_bytes);
  std::unique_ptr<char[]> large;  // one frame larger than the staging buffer (dim > 512k)
  char* buffer = staging.get();
  if (frame_bytes > kStagingBytes) {
    large.reset(new char[frame_bytes]);
    buffer = large.get();
  }
  for (int64_t done = 0; done < run.frames;) {
    const int64_t count = std::min(frames_per_read, run.frames - done);
    read_run_bytes(file.fd, file.data_offset + (run.first_frame + done) * frame_bytes, count * frame_bytes, buffer,
                   run_index);
    for (int64_t f = 0; f < count; ++f) {
      const char* in = buffer + f * frame_bytes;
      float* row = out + (done + f) * dim;
      for (int k = 0; k < dim; ++k) {
        uint16_t bits;
        std::memcpy(&bits, in + 2 * k, 2);
        if (file.swap) bits = __builtin_bswap16(bits);
        int16_t value;
        std::memcpy(&value, &bits, 2);
        row[k] = (static_cast<float>(value) + file.bias[k]) / file.scale[k];
      }
    }
    done += count;
  }
}

}  // namespace

void read_runs(const std::vector<File>& files, const std::vector<Run>& runs, int dim, bool compressed, float* frames) {
  float* out = frames;
  for (size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    const File& file = files[static_cast<size_t>(run.file)];
    const int64_t values = run.frames * dim;
    if (compressed) {
      read_compressed(file, run, static_cast<int64_t>(r), dim, out);
    } else {  // float32: straight into the output, swapped in place
      const int64_t frame_bytes = int64_t{4} * dim;
      read_run_bytes(file.fd, file.data_offset + run.first_frame * frame_bytes, run.frames * frame_bytes,
                     reinterpret_cast<char*>(out), static_cast<int64_t>(r));
      if (file.swap) swap_floats(out, values);
    }
    out += values;
  }
}

template <class T>
void expand_context(const float* frames, int dim, const int64_t* seq_offsets, int64_t sequences, int left, int right,
                    T* out) {
  const int64_t width = int64_t{dim} * (1 + left + right);
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t first = seq_offsets[s], last = seq_offsets[s + 1] - 1;
    for (int64_t t = first; t <= last; ++t) {
      T* row = out + t * width;
      for (int j = -left; j <= right; ++j) {
        const float* source = frames + std::clamp<int64_t>(t + j, first, last) * dim;
        T* block = row + int64_t{j + left} * dim;
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(block, source, sizeof(float) * static_cast<size_t>(dim));
        } else {
          for (int k = 0; k < dim; ++k) block[k] = static_cast<T>(source[k]);
        }
      }
    }
  }
}

template void expand_context<float>(const float*, int, const int64_t*, int64_t, int, int, float*);
template void expand_context<double>(const float*, int, const int64_t*, int64_t, int, int, double*);

}  // namespace cntkio::htk
