// Minibatch assembly: resolves each unit to a (chunk, row) of every deserializer, its first sample and
// samples, and copies it stream by stream.
#include "assemble.hpp"

#include <algorithm>
#include <cstring>

namespace cntkio::assemble {

namespace {

// memcpy of `bytes` bytes; nothing when there are none (an empty array's pointer may be null, and memcpy must not
// be given a null pointer even for 0 bytes).
inline void copy_bytes(void* to, const void* from, size_t bytes) {
  if (bytes != 0) std::memcpy(to, from, bytes);
}

constexpr int64_t kPrefetch = 8;  // units ahead whose rows are prefetched
constexpr size_t kPrefetchLines = 16;  // cache lines of a unit's range of an array prefetched at most

// Asks for the cache lines of `bytes` bytes at `from` (at most kPrefetchLines): a unit's rows of a randomized minibatch
// lie far from the previous unit's, so each range starts with a miss the hardware prefetcher cannot foresee, and its
// next lines would follow one by one.
inline void prefetch_range(const void* from, size_t bytes) {
  const char* p = static_cast<const char*>(from);
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / 64, last = (reinterpret_cast<uintptr_t>(p) + bytes) / 64;
  const size_t lines = std::min<size_t>(static_cast<size_t>(last - first) + 1, kPrefetchLines);
  for (size_t k = 0; k < lines; ++k) __builtin_prefetch(p + 64 * k);
}
constexpr uint8_t kUnusable = 2;  // Chunk::bad: a sequence without usable data (dropped in every mode)

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

// The last position p of the sorted `values` (values[0] <= x) with values[p] <= x: a binary search without
// branches on the data, so random frames do not stall on mispredictions.
int64_t last_at_most(const int64_t* values, int64_t n, int64_t x) {
  const int64_t* base = values;
  while (n > 1) {
    const int64_t half = n / 2;
    base = base[half] <= x ? base + half : base;
    n -= half;
  }
  return base - values;
}

// Where sample `sample`'s values start in a sparse column.
inline int64_t entry_of(const Column& c, int64_t sample) {
  return c.per_sample >= 0 ? sample * c.per_sample : c.indptr[sample];
}

}  // namespace

int64_t uniform_entries(const int64_t* indptr, int64_t samples) {
  if (samples <= 0 || indptr[0] != 0) return -1;
  const int64_t k = indptr[1];
  if (k < 0) return -1;
  for (int64_t i = 1; i <= samples; ++i) {
    if (indptr[i] != i * k) return -1;
  }
  return k;
}

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

Store::Store(std::vector<std::vector<ColumnSpec>> layouts, std::vector<int64_t> slot_counts)
    : layouts_(std::move(layouts)) {
  if (layouts_.empty() || slot_counts.size() != layouts_.size())
    throw std::invalid_argument("one layout and one slot count per deserializer");
  for (const int64_t count : slot_counts) {
    if (count < 0) throw std::invalid_argument("negative slot count");
    slots_.emplace_back(static_cast<size_t>(count));
    seen_.emplace_back(static_cast<size_t>(count), 0);
  }
  lookups_.resize(layouts_.size());
  broadcast_.assign(layouts_.size(), 0);
  versions_.assign(layouts_.size(), 1);
}

void Store::load(size_t d, int64_t index, std::shared_ptr<Slot> slot) {
  if (d >= layouts_.size() || index < 0 || index >= slot_count(d)) throw std::out_of_range("slot index out of range");
  const Chunk& chunk = *slot->chunk;
  validate(chunk, layouts_[d]);
  if (slot->row0 < 0 || slot->row0 > chunk.sequences) throw std::invalid_argument("row0 outside the chunk");
  for (const int64_t row : slot->rows) {
    if (row < 0 || row >= chunk.sequences) throw std::invalid_argument("a row outside the chunk");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[d][static_cast<size_t>(index)] = std::move(slot);
}

void Store::clear(size_t d, int64_t index) {
  if (d >= layouts_.size() || index < 0 || index >= slot_count(d)) throw std::out_of_range("slot index out of range");
  std::shared_ptr<const Slot> dropped;  // released after the lock
  std::lock_guard<std::mutex> lock(mutex_);
  dropped.swap(slots_[d][static_cast<size_t>(index)]);
}

void Store::set_lookup(size_t d, Lookup lookup) {
  if (d == 0 || d >= layouts_.size()) throw std::invalid_argument("only a secondary deserializer has a lookup");
  if ((lookup.match32 == nullptr) == (lookup.match64 == nullptr)) throw std::invalid_argument("one match array");
  if (lookup.chunks * versions_[d] != slot_count(d)) throw std::invalid_argument("chunk starts do not match the slot count");
  for (int64_t c = 0; c < lookup.chunks; ++c) {
    if (lookup.chunk_starts[c + 1] < lookup.chunk_starts[c]) throw std::invalid_argument("chunk starts decrease");
  }
  const int64_t total = lookup.chunk_starts[lookup.chunks];
  for (int64_t s = 0; s < lookup.sequences; ++s) {
    const int64_t g = lookup.match32 ? lookup.match32[s] : lookup.match64[s];
    if (g < 0 || g >= total) throw std::invalid_argument("a match outside the secondary's sequences");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  lookups_[d] = std::move(lookup);
}

void Store::set_versions(size_t d, int64_t versions) {
  if (d >= layouts_.size() || versions < 1 || versions > 8 || slot_count(d) % versions != 0)
    throw std::invalid_argument("versions must divide the deserializer's slot count (1..8)");
  std::lock_guard<std::mutex> lock(mutex_);
  versions_[d] = versions;
}

void Store::set_broadcast(size_t d) {
  if (d == 0 || d >= layouts_.size()) throw std::invalid_argument("only a secondary deserializer can be broadcast");
  std::lock_guard<std::mutex> lock(mutex_);
  broadcast_[d] = 1;
}

void Store::set_caps(const int64_t* caps, int64_t sequences, std::shared_ptr<void> owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  caps_ = caps;
  caps_size_ = sequences;
  caps_owner_ = std::move(owner);
}

GatherResult Store::gather(const Request& request) const {
  const size_t num_parts = layouts_.size();
  const int64_t n = request.n;
  GatherResult result;
  // Per unit and deserializer: the chunk and row read; per unit: first sample, samples (< 0: all), sequence.
  std::vector<const Chunk*> chunks(static_cast<size_t>(n) * num_parts);
  std::vector<int64_t> rows(chunks.size()), firsts(n), takes(n), sequences(n);
  std::vector<std::shared_ptr<const Slot>> held;  // kept alive while copying, after the lock is released
  std::vector<int64_t> ids(n);
  std::vector<uint8_t> broadcast;
  uint64_t stamp = 0;
  auto hold = [&](size_t d, const std::vector<int64_t>& wanted) {  // holds the loaded slots, lists the others
    std::vector<uint64_t>& seen = seen_[d];
    for (const int64_t id : wanted) {
      if (seen[static_cast<size_t>(id)] == stamp) continue;
      seen[static_cast<size_t>(id)] = stamp;
      const auto& slot = slots_[d][static_cast<size_t>(id)];
      if (slot) {
        held.push_back(slot);
      } else {
        result.missing.emplace_back(static_cast<int32_t>(d), id);
      }
    }
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broadcast = broadcast_;
    stamp = ++gathers_;
    const auto& table = slots_[0];
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = request.chunk[i];
      if (ids[i] < 0 || ids[i] >= static_cast<int64_t>(table.size())) throw std::invalid_argument("chunk index out of range");
    }
    hold(0, ids);
    if (!result.missing.empty()) return result;
    // The primary: each unit's row, first sample and sequence. The units of a randomized minibatch lie far
    // apart in memory: the next units' rows are prefetched while one is resolved.
    for (int64_t i = 0; i < n; ++i) {
      if (request.kind != UnitKind::frames && i + kPrefetch < n) {
        const Slot& ahead = *table[request.chunk[i + kPrefetch]];
        const int64_t local = request.unit[i + kPrefetch] - ahead.first_unit;
        if (ahead.rows.empty() && local >= 0 && ahead.row0 + local < ahead.chunk->sequences) {
          for (const Column& c : ahead.chunk->columns) __builtin_prefetch(c.seq_offsets + ahead.row0 + local);
        }
      }
      const Slot& slot = *table[request.chunk[i]];
      int64_t local = request.unit[i] - slot.first_unit, first = 0, take = -1;  // take < 0: the whole sequence
      if (request.kind == UnitKind::frames) {
        const auto& starts = slot.frame_starts;
        if (local < 0 || starts.empty() || local >= starts.back()) throw std::invalid_argument("frame outside its chunk");
        const int64_t row = last_at_most(starts.data(), static_cast<int64_t>(starts.size()), local);
        first = local - starts[static_cast<size_t>(row)];
        local = row;
        take = 1;
      } else if (request.kind == UnitKind::pieces) {
        first = request.offset[i];
        take = request.count[i];
        if (first < 0 || take < 0) throw std::invalid_argument("negative piece offset or count");
      }
      const int64_t used = slot.rows.empty() ? slot.chunk->sequences - slot.row0 : static_cast<int64_t>(slot.rows.size());
      if (local < 0 || local >= used) throw std::invalid_argument("sequence outside its chunk");
      rows[i * num_parts] = slot.rows.empty() ? slot.row0 + local : slot.rows[local];
      chunks[i * num_parts] = slot.chunk.get();
      firsts[i] = first;
      takes[i] = take;
      sequences[i] = slot.first_sequence + local;
    }
    // The secondaries: the sequence joined to each unit's, in the chunk that holds it.
    for (size_t d = 1; d < num_parts; ++d) {
      const Lookup& lookup = lookups_[d];
      if (!lookup.chunk_starts) throw std::invalid_argument("a secondary deserializer without a lookup");
      const int64_t* starts = lookup.chunk_starts;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = sequences[i];
        if (s < 0 || s >= lookup.sequences) throw std::invalid_argument("a sequence outside the corpus");
        const int64_t g = lookup.match32 ? lookup.match32[s] : lookup.match64[s];
        const int64_t c = std::upper_bound(starts, starts + lookup.chunks + 1, g) - starts - 1;
        const int64_t versions = versions_[d];
        ids[i] = versions == 1 ? c : c * versions + (request.version ? request.version[i] % versions : 0);
        rows[i * num_parts + d] = g - starts[c];
      }
      hold(d, ids);
      if (!result.missing.empty()) continue;
      for (int64_t i = 0; i < n; ++i) chunks[i * num_parts + d] = slots_[d][static_cast<size_t>(ids[i])]->chunk.get();
    }
    if (!result.missing.empty()) return result;
  }
  std::vector<ColumnSpec> layout;  // every stream, deserializer after deserializer
  std::vector<size_t> part_of, column_of;
  for (size_t d = 0; d < num_parts; ++d) {
    for (size_t s = 0; s < layouts_[d].size(); ++s) {
      layout.push_back(layouts_[d][s]);
      part_of.push_back(d);
      column_of.push_back(s);
    }
  }
  const size_t num_streams = layout.size();
  std::vector<int64_t> counts(static_cast<size_t>(n) * num_streams), samples_at(counts.size());
  for (int64_t i = 0; i < n; ++i) {
    // Frames and pieces of a sequence a counted error damaged would not line up across streams: the
    // whole sequence is invalid there (dropped, as the error was counted); whole sequences keep what parsed.
    bool invalid = false;
    for (size_t d = 0; d < num_parts; ++d) {
      const Chunk& chunk = *chunks[i * num_parts + d];
      const uint8_t bad = chunk.bad.empty() ? 0 : chunk.bad[rows[i * num_parts + d]];
      invalid = invalid || bad >= kUnusable || (bad && takes[i] >= 0);
    }
    if (invalid) {
      if (result.keep.empty()) result.keep.assign(n, 1);
      result.keep[i] = 0;
    }
    const int64_t cap = caps_ && takes[i] < 0 && sequences[i] < caps_size_ ? caps_[sequences[i]] : -1;
    int64_t primary_count = 0;  // what a broadcast sample is repeated to: the most the primary's streams give
    for (size_t s = 0; s < num_streams; ++s) {
      const size_t d = part_of[s];
      const int64_t row = rows[i * num_parts + d];
      const Column& c = chunks[i * num_parts + d]->columns[column_of[s]];
      const int64_t length = c.seq_offsets[row + 1] - c.seq_offsets[row];
      const size_t at = static_cast<size_t>(i) * num_streams + s;
      const bool repeated = broadcast[d] != 0;
      samples_at[at] = c.seq_offsets[row] + (repeated ? 0 : firsts[i]);
      if (c.sparse) {
        const int64_t rows_read = repeated ? 1 : takes[i] >= 0 ? takes[i] : length;
        if (c.per_sample >= 0) {
          prefetch_range(c.indices + samples_at[at] * c.per_sample,
                         static_cast<size_t>(rows_read * c.per_sample) * sizeof(int32_t));
        } else {
          prefetch_range(c.indptr + samples_at[at], static_cast<size_t>(rows_read + 1) * sizeof(int64_t));
        }
      }
      if (invalid) {
        counts[at] = 0;
      } else if (repeated) {
        if (length < 1) {
          result.short_unit = i;
          result.short_stream = static_cast<int32_t>(s);
          result.short_row = row;
          return result;
        }
        counts[at] = primary_count;
      } else if (takes[i] < 0) {
        counts[at] = cap >= 0 ? std::min(length, cap) : length;
      } else if (firsts[i] + takes[i] > length) {
        result.short_unit = i;  // a stream shorter than the sequence without a counted error
        result.short_stream = static_cast<int32_t>(s);
        result.short_row = row;
        return result;
      } else {
        counts[at] = takes[i];
      }
      if (d == 0) primary_count = std::max(primary_count, counts[at]);
    }
  }
  auto kept = [&](int64_t i) { return result.keep.empty() || result.keep[i]; };
  int64_t units_kept = n;
  for (const uint8_t k : result.keep) units_kept -= k == 0;
  result.streams.resize(num_streams);
  // Sizes of every stream first (prefetching the rows each unit reads), then one arena for all of them, then the
  // copies, stream by stream.
  std::vector<int64_t> stream_samples(num_streams), stream_entries(num_streams);
  for (size_t s = 0; s < num_streams; ++s) {
    const size_t d = part_of[s];
    const int64_t itemsize = layout[s].itemsize, width = layout[s].width;
    const bool sparse = layout[s].sparse, repeated = broadcast[d] != 0;
    int64_t samples = 0, entries = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!kept(i)) continue;
      const Column& c = chunks[i * num_parts + d]->columns[column_of[s]];
      const size_t at = static_cast<size_t>(i) * num_streams + s;
      const int64_t count = counts[at], sample = samples_at[at];
      samples += count;
      if (sparse) {
        const int64_t a = entry_of(c, sample), b = entry_of(c, sample + (repeated ? 1 : count));
        prefetch_range(c.values + a * itemsize, static_cast<size_t>((b - a) * itemsize));
        prefetch_range(c.indices + a, static_cast<size_t>(b - a) * sizeof(int32_t));
        entries += repeated ? count * (b - a) : b - a;
      } else {  // the rows' first cache lines (a frame of 40 floats spans three)
        prefetch_range(c.values + sample * width * itemsize, static_cast<size_t>((repeated ? 1 : count) * width * itemsize));
      }
    }
    stream_samples[s] = samples;
    stream_entries[s] = entries;
  }
  size_t arena_bytes = 0;
  auto part = [&](size_t bytes) {  // the offset of a part of `bytes` bytes
    const size_t at = arena_bytes;
    arena_bytes += (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    return at;
  };
  for (size_t s = 0; s < num_streams; ++s) {
    StreamOut& out = result.streams[s];
    const size_t itemsize = static_cast<size_t>(layout[s].itemsize), samples = static_cast<size_t>(stream_samples[s]);
    out.lengths_at = part(static_cast<size_t>(units_kept) * sizeof(int64_t));
    if (layout[s].sparse) {
      const size_t entries = static_cast<size_t>(stream_entries[s]);
      out.values_at = part(entries * itemsize);
      out.indices_at = part(entries * sizeof(int32_t));
      out.indptr_at = part((samples + 1) * sizeof(int64_t));
    } else {
      out.values_at = part(samples * static_cast<size_t>(layout[s].width) * itemsize);
    }
  }
  result.arena.resize(arena_bytes);
  char* const arena = result.arena.data();
  for (size_t s = 0; s < num_streams; ++s) {
    StreamOut& out = result.streams[s];
    const size_t itemsize = static_cast<size_t>(layout[s].itemsize), samples = static_cast<size_t>(stream_samples[s]);
    out.lengths = {reinterpret_cast<int64_t*>(arena + out.lengths_at), static_cast<size_t>(units_kept)};
    if (layout[s].sparse) {
      const size_t entries = static_cast<size_t>(stream_entries[s]);
      out.values = {arena + out.values_at, entries * itemsize};
      out.indices = {reinterpret_cast<int32_t*>(arena + out.indices_at), entries};
      out.indptr = {reinterpret_cast<int64_t*>(arena + out.indptr_at), samples + 1};
    } else {
      out.values = {arena + out.values_at, samples * static_cast<size_t>(layout[s].width) * itemsize};
    }
  }
  for (size_t s = 0; s < num_streams; ++s) {
    StreamOut& out = result.streams[s];
    const size_t d = part_of[s];
    const int64_t itemsize = layout[s].itemsize, width = layout[s].width;
    const bool sparse = layout[s].sparse, repeated = broadcast[d] != 0;
    if (sparse) out.indptr[0] = 0;
    int64_t sample_at = 0, entry_at = 0, unit_at = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!kept(i)) continue;
      const Column& c = chunks[i * num_parts + d]->columns[column_of[s]];
      const size_t at = static_cast<size_t>(i) * num_streams + s;
      const int64_t count = counts[at], sample = samples_at[at];
      out.lengths[static_cast<size_t>(unit_at++)] = count;
      if (repeated) {  // one sample, `count` times
        const int64_t a = sparse ? entry_of(c, sample) : 0, b = sparse ? entry_of(c, sample + 1) : 0;
        const int64_t row_bytes = width * itemsize;
        for (int64_t r = 0; r < count; ++r) {
          if (sparse) {
            copy_bytes(out.values.data() + entry_at * itemsize, c.values + a * itemsize, static_cast<size_t>((b - a) * itemsize));
            copy_bytes(out.indices.data() + entry_at, c.indices + a, static_cast<size_t>(b - a) * sizeof(int32_t));
            entry_at += b - a;
            out.indptr[static_cast<size_t>(sample_at + r + 1)] = entry_at;
          } else {
            copy_bytes(out.values.data() + (sample_at + r) * row_bytes, c.values + sample * row_bytes,
                        static_cast<size_t>(row_bytes));
          }
        }
      } else if (sparse) {
        const int64_t a = entry_of(c, sample), b = entry_of(c, sample + count);
        copy_bytes(out.values.data() + entry_at * itemsize, c.values + a * itemsize, static_cast<size_t>((b - a) * itemsize));
        copy_bytes(out.indices.data() + entry_at, c.indices + a, static_cast<size_t>(b - a) * sizeof(int32_t));
        for (int64_t r = 0; r < count; ++r) {
          out.indptr[static_cast<size_t>(sample_at + r + 1)] = entry_at + (entry_of(c, sample + r + 1) - a);
        }
        entry_at += b - a;
      } else {
        const int64_t row_bytes = width * itemsize;
        copy_bytes(out.values.data() + sample_at * row_bytes, c.values + sample * row_bytes,
                    static_cast<size_t>(count * row_bytes));
      }
      sample_at += count;
    }
  }
  return result;
}

}  // namespace cntkio::assemble
