// HTK feature frames for a chunk of utterances: runs of frames read from HTK files with pread, decoded (byte
// swap, or (short + B[k]) / A[k] for compressed `_C` files) and expanded by a context window (edge frames
// repeated), without Python. Headers, SCP files and the index stay in Python; this is only the per-frame work.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace cntkio::htk {

struct File {                     // an open HTK file the chunk reads from
  int fd = -1;
  int64_t data_offset = 0;        // byte offset of frame 0
  bool swap = false;              // stored in the other byte order than the host's
  const float* scale = nullptr;   // compressed files: A[dim]
  const float* bias = nullptr;    // compressed files: B[dim]
};

struct Run {                      // frames first_frame .. first_frame + frames - 1 of one file, stored in a row
  int32_t file = 0;
  int64_t first_frame = 0;
  int64_t frames = 0;
};

// A file held fewer bytes than a run needs (truncated since it was indexed).
struct ShortData : std::runtime_error {
  ShortData(int64_t run, int64_t offset) : std::runtime_error("HTK file ended early"), run(run), offset(offset) {}
  int64_t run;     // the run that could not be read
  int64_t offset;  // where reading stopped: the end of the file, or the run's start if it lies past the end
};

// Reads the runs one after the other into `frames` (sum of run frames x dim floats). Elements are float32, or
// int16 when `compressed`.
void read_runs(const std::vector<File>& files, const std::vector<Run>& runs, int dim, bool compressed, float* frames);

// out[t] = frames[t - left] .. frames[t + right] concatenated (indices clamped to t's sequence), converted to T.
// Sequence s holds frames seq_offsets[s] .. seq_offsets[s + 1] - 1.
template <class T>
void expand_context(const float* frames, int dim, const int64_t* seq_offsets, int64_t sequences, int left,
                    int right, T* out);

}  // namespace cntkio::htk
