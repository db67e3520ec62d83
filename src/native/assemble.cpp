// Minibatch assembly: resolves each unit to (row, first sample, samples) and copies it per stream.
#include "assemble.hpp"

#include <algorithm>
#include <cstring>

namespace cntkio::assemble {

namespace {

constexpr int64_t kPrefetch = 8;  // units ahead whose rows are prefetched

[[noreturn]] void invalid(size_t stream, const std::string& what) {
  throw std::invalid_argument("stream " + std::to_string(stream) + ": " + what);
}

void check_offsets(const int64_t* offsets, int64_t count, int64_t last, size_t stream, const char* name) {
  if (offsets[0] != 0) invalid(stream, std::string(name) + " must start at 0");
  for (int64_t i = 0; i < count; ++i) {
    if (offsets[i + 1] < offsets[i]) invalid(stream, std::string(name) + " must not decrease");
  }
  if (offsets[count] != last) {
    invalid(stream, std::string(name) + " ends at " + std::to_string(offsets[count]) + ", expected " +
                        std::to_string(last));
  }
}

}  // namespace

void validate(const Chunk& chunk, const std::vector<ColumnSpec>& layout) {
  if (!chunk.bad.empty() && static_cast<int64_t>(chunk.bad.size()) != chunk.sequences)
    throw std::invalid_argument("the invalid-sequence flags do not match the number of sequences");
  if (chunk.columns.size() != layout.size()) throw std::invalid_argument("wrong number of streams");
  for (size_t s = 0; s < chunk.columns.size(); ++s) {
    const Column& c = chunk.columns[s];
    if (c.sparse != layout[s].sparse) invalid(s, c.sparse ? "sparse data for a dense stream" : "dense data for a sparse stream");
    if (c.width != layout[s].width) {
      invalid(s, "samples have " + std::to_string(c.width) + " values, expected " + std::to_string(layout[s].width));
    }
    if (c.itemsize != layout[s].itemsize) invalid(s, "values have another precision than the stream");
    check_offsets(c.seq_offsets, chunk.sequences, c.samples, s, "sequence offsets");
    if (!c.sparse) continue;
    check_offsets(c.indptr, c.samples, c.nnz, s, "indptr");
    for (int64_t k = 0; k < c.nnz; ++k) {
      if (c.indices[k] < 0 || c.indices[k] >= c.width) {
        invalid(s, "sparse index " + std::to_string(c.indices[k]) + " outside [0, " + std::to_string(c.width) + ")");
      }
    }
  }
}

GatherResult gather(const std::vector<const Slot*>& slots, const Request& request,
                    const std::vector<ColumnSpec>& layout) {
  const size_t num_streams = layout.size();
  const int64_t n = request.n;
  GatherResult result;
  result.streams.resize(num_streams);
  // Pass 1: each unit's row and first sample, and how many samples it takes from each stream. The units
  // of a randomized minibatch lie far apart in memory: the next units' rows are prefetched while one is read.
  std::vector<int64_t> firsts(n), counts(static_cast<size_t>(n) * num_streams), samples_at(counts.size());
  std::vector<const Chunk*> chunks(n);
  for (int64_t i = 0; i < n; ++i) {
    if (request.kind != UnitKind::frames && i + kPrefetch < n) {
      const Slot& ahead = *slots[request.chunk[i + kPrefetch]];
      const int64_t row = request.unit[i + kPrefetch] - ahead.first_unit + ahead.row0;
      if (row >= 0 && row < ahead.chunk->sequences) {
        for (const Column& c : ahead.chunk->columns) __builtin_prefetch(c.seq_offsets + row);
      }
    }
    const Slot& slot = *slots[request.chunk[i]];
    const Chunk& chunk = *slot.chunk;
    int64_t row = request.unit[i] - slot.first_unit, first = 0, take = -1;  // take < 0: the whole sequence
    if (request.kind == UnitKind::frames) {
      const auto& starts = slot.frame_starts;
      if (row < 0 || starts.empty() || row >= starts.back()) throw std::invalid_argument("frame outside its chunk");
      const auto it = std::upper_bound(starts.begin(), starts.end(), row) - 1;
      first = row - *it;
      row = it - starts.begin();
      take = 1;
    } else if (request.kind == UnitKind::pieces) {
      first = request.offset[i];
      take = request.count[i];
      if (first < 0 || take < 0) throw std::invalid_argument("negative piece offset or count");
    }
    row += slot.row0;
    if (row < 0 || row >= chunk.sequences) throw std::invalid_argument("sequence outside its chunk");
    firsts[i] = first;
    chunks[i] = &chunk;
    // Frames and pieces of a sequence a counted error damaged would not line up across streams: the
    // whole sequence is invalid there (dropped, as the error was counted); whole sequences keep what parsed.
    const bool invalid = take >= 0 && !chunk.bad.empty() && chunk.bad[row];
    if (invalid) {
      if (result.keep.empty()) result.keep.assign(n, 1);
      result.keep[i] = 0;
    }
    for (size_t s = 0; s < num_streams; ++s) {
      const Column& c = chunk.columns[s];
      const int64_t length = c.seq_offsets[row + 1] - c.seq_offsets[row];
      samples_at[i * num_streams + s] = c.seq_offsets[row] + first;
      if (c.sparse) __builtin_prefetch(c.indptr + samples_at[i * num_streams + s]);
      int64_t& count = counts[i * num_streams + s];
      if (invalid) {
        count = 0;
      } else if (take < 0) {
        count = length;
      } else if (first + take > length) {
        result.short_unit = i;  // a stream shorter than the sequence without a counted error
        result.short_stream = static_cast<int32_t>(s);
        result.short_row = row;
        return result;
      } else {
        count = take;
      }
    }
  }
  auto kept = [&](int64_t i) { return result.keep.empty() || result.keep[i]; };
  // Pass 2: sizes, then copies.
  for (size_t s = 0; s < num_streams; ++s) {
    StreamOut& out = result.streams[s];
    const int64_t itemsize = layout[s].itemsize, width = layout[s].width;
    const bool sparse = layout[s].sparse;
    int64_t samples = 0, entries = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!kept(i)) continue;
      const Column& c = chunks[i]->columns[s];
      const int64_t count = counts[i * num_streams + s];
      const int64_t sample = samples_at[i * num_streams + s];
      samples += count;
      if (sparse) {
        const int64_t a = c.indptr[sample];
        __builtin_prefetch(c.values + a * itemsize);
        __builtin_prefetch(c.indices + a);
        entries += c.indptr[sample + count] - a;
      } else {
        __builtin_prefetch(c.values + sample * width * itemsize);
      }
    }
    out.lengths.reserve(n);
    if (sparse) {
      out.values.resize(static_cast<size_t>(entries * itemsize));
      out.indices.resize(static_cast<size_t>(entries));
      out.indptr.resize(static_cast<size_t>(samples + 1));
    } else {
      out.values.resize(static_cast<size_t>(samples * width * itemsize));
    }
    int64_t sample_at = 0, entry_at = 0;
    if (sparse) out.indptr[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!kept(i)) continue;
      const Column& c = chunks[i]->columns[s];
      const int64_t count = counts[i * num_streams + s];
      const int64_t sample = samples_at[i * num_streams + s];
      out.lengths.push_back(count);
      if (c.sparse) {
        const int64_t a = c.indptr[sample], b = c.indptr[sample + count];
        std::memcpy(out.values.data() + entry_at * itemsize, c.values + a * itemsize, static_cast<size_t>((b - a) * itemsize));
        std::memcpy(out.indices.data() + entry_at, c.indices + a, static_cast<size_t>(b - a) * sizeof(int32_t));
        for (int64_t r = 0; r < count; ++r) out.indptr[sample_at + r + 1] = entry_at + (c.indptr[sample + r + 1] - a);
        entry_at += b - a;
      } else {
        const int64_t row_bytes = c.width * itemsize;
        std::memcpy(out.values.data() + sample_at * row_bytes, c.values + sample * row_bytes,
                    static_cast<size_t>(count * row_bytes));
      }
      sample_at += count;
    }
  }
  return result;
}

}  // namespace cntkio::assemble
