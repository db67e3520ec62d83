// Fuzz target of the native minibatch assembly (libFuzzer entry point): chunks built from the input bytes
// (sequence offsets, CSR arrays, indices, invalid-sequence flags, a primary's rows, a secondary's lookup,
// truncation caps) must either be refused at the boundary or gather any request without reading out of
// bounds; a gathered minibatch's arrays must be consistent.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "../src/native/assemble.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::assemble;

namespace {

struct Reader {
  const uint8_t* data;
  size_t size, at = 0;
  uint32_t next(uint32_t bound) {
    uint32_t v = 0;
    for (int k = 0; k < 2; ++k) v = (v << 8) | (at < size ? data[at++] : 0);
    return bound ? v % bound : 0;
  }
};

struct Owned {
  std::vector<int64_t> seq_offsets, indptr;
  std::vector<float> values;
  std::vector<int32_t> indices;
};

// A chunk of `layout` built from the input (often malformed), or null when `validate` refuses it.
std::shared_ptr<Chunk> make_chunk(Reader& in, const std::vector<ColumnSpec>& layout, int64_t sequences) {
  auto owned = std::make_shared<std::vector<Owned>>(layout.size());
  auto chunk = std::make_shared<Chunk>();
  chunk->sequences = sequences;
  for (size_t s = 0; s < layout.size(); ++s) {
    Owned& o = (*owned)[s];
    o.seq_offsets.push_back(static_cast<int64_t>(in.next(2)));  // usually 0
    for (int64_t q = 0; q < sequences; ++q) o.seq_offsets.push_back(o.seq_offsets.back() + in.next(5) - (in.next(16) == 0));
    const int64_t samples = std::max<int64_t>(0, o.seq_offsets.back() + (in.next(8) == 0 ? 1 : 0));
    Column c;
    c.sparse = layout[s].sparse;
    c.width = layout[s].width + (in.next(32) == 0);
    c.itemsize = 4;
    c.samples = samples;
    if (c.sparse) {
      o.indptr.push_back(0);
      const int64_t fixed = in.next(3) == 0 ? static_cast<int64_t>(in.next(3)) : -1;  // k values every sample
      for (int64_t r = 0; r < samples; ++r) {
        o.indptr.push_back(o.indptr.back() + (fixed >= 0 ? fixed : static_cast<int64_t>(in.next(4)) - (in.next(32) == 0)));
      }
      c.nnz = std::max<int64_t>(0, o.indptr.back());
      o.values.resize(static_cast<size_t>(c.nnz), 1.0f);
      for (int64_t k = 0; k < c.nnz; ++k) o.indices.push_back(static_cast<int32_t>(in.next(22)) - 1);
      c.indptr = o.indptr.data();
      c.indices = o.indices.data();
      c.per_sample = uniform_entries(c.indptr, samples);
    } else {
      o.values.resize(static_cast<size_t>(samples * c.width), 2.0f);
    }
    c.values = reinterpret_cast<const char*>(o.values.data());
    c.seq_offsets = o.seq_offsets.data();
    chunk->columns.push_back(c);
  }
  if (in.next(2)) {
    for (int64_t q = 0; q < sequences; ++q) chunk->bad.push_back(in.next(8) == 0);
  }
  chunk->owner = owned;
  try {
    validate(*chunk, layout);
  } catch (const std::invalid_argument&) {
    return nullptr;  // refused at the boundary: never gathered
  }
  return chunk;
}

}  // namespace

// A primary chunk (some of its rows, as a table chunk) joined to a secondary chunk through a fuzzed
// lookup; any request either fails cleanly or gives consistent arrays for every stream.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const std::vector<ColumnSpec> primary_layout = {{false, 3, 4}, {true, 20, 4}};
  const std::vector<ColumnSpec> secondary_layout = {{true, 7, 4}};
  const int64_t sequences = 1 + in.next(12), secondary_sequences = 1 + in.next(12);
  auto primary = make_chunk(in, primary_layout, sequences);
  auto secondary = make_chunk(in, secondary_layout, secondary_sequences);
  if (!primary || !secondary) return 0;
  Store store({primary_layout, secondary_layout}, {1, 1});
  auto slot = std::make_shared<Slot>();
  slot->chunk = primary;
  slot->row0 = in.next(2);
  if (in.next(2)) {
    for (int64_t q = 0; q < sequences; ++q) {
      if (in.next(2)) slot->rows.push_back(q + (in.next(32) == 0 ? sequences : 0));
    }
  }
  slot->first_unit = 100;
  slot->first_sequence = in.next(3);
  const int64_t used = slot->rows.empty() ? sequences - slot->row0 : static_cast<int64_t>(slot->rows.size());
  const UnitKind kind = static_cast<UnitKind>(in.next(3));
  if (kind == UnitKind::frames) {
    slot->frame_starts.push_back(0);
    for (int64_t q = 0; q < used; ++q) slot->frame_starts.push_back(slot->frame_starts.back() + 1 + in.next(3));
  }
  auto match = std::make_shared<std::vector<int64_t>>();
  for (int64_t q = 0; q < used + 2; ++q) match->push_back(static_cast<int64_t>(in.next(secondary_sequences + 2)) - 1);
  auto starts = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{0, secondary_sequences});
  Lookup lookup;
  lookup.match64 = match->data();
  lookup.sequences = static_cast<int64_t>(match->size());
  lookup.chunk_starts = starts->data();
  lookup.chunks = 1;
  lookup.owner = std::make_shared<std::pair<decltype(match), decltype(starts)>>(match, starts);
  auto caps = std::make_shared<std::vector<int64_t>>();
  for (int64_t q = 0; q < used + 2; ++q) caps->push_back(in.next(6));
  try {
    store.load(0, 0, slot);
    auto whole = std::make_shared<Slot>();
    whole->chunk = secondary;
    store.load(1, 0, whole);
    store.set_lookup(1, lookup);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (in.next(2)) store.set_caps(caps->data(), static_cast<int64_t>(caps->size()), caps);
  const bool broadcast = in.next(2) != 0;
  if (broadcast) store.set_broadcast(1);
  const int64_t n = in.next(20);
  std::vector<int32_t> chunks(n, 0);
  std::vector<int64_t> units(n), offsets(n), counts(n);
  for (int64_t i = 0; i < n; ++i) {
    units[i] = 100 + static_cast<int64_t>(in.next(24)) - 2;
    offsets[i] = static_cast<int64_t>(in.next(6)) - 1;
    counts[i] = in.next(5);
  }
  Request request;
  request.chunk = chunks.data();
  request.unit = units.data();
  request.offset = offsets.data();
  request.count = counts.data();
  request.n = n;
  request.kind = kind;
  std::vector<ColumnSpec> layout = primary_layout;
  layout.insert(layout.end(), secondary_layout.begin(), secondary_layout.end());
  try {
    const GatherResult r = store.gather(request);
    check(r.missing.empty());
    if (r.short_unit >= 0) return 0;
    check(r.streams.size() == layout.size());
    const char* const arena = r.arena.data();
    auto inside = [&](const auto& span, size_t at) {  // a part of the arena, where its offset says, aligned
      const size_t bytes = span.size() * sizeof(*span.data());
      check(at % kArenaAlign == 0 && at + bytes <= r.arena.size());
      check(bytes == 0 || reinterpret_cast<const char*>(span.data()) == arena + at);
    };
    for (size_t s = 0; s < layout.size(); ++s) {
      const StreamOut& out = r.streams[s];
      inside(out.values, out.values_at);
      inside(out.lengths, out.lengths_at);
      if (layout[s].sparse) {
        inside(out.indices, out.indices_at);
        inside(out.indptr, out.indptr_at);
      }
      int64_t samples = 0;
      for (int64_t l : out.lengths) samples += l;
      if (layout[s].sparse) {
        check(static_cast<int64_t>(out.indptr.size()) == samples + 1);
        check(out.indptr.back() == static_cast<int64_t>(out.indices.size()));
        for (int32_t k : out.indices) check(k >= 0 && k < layout[s].width);
      } else {
        check(static_cast<int64_t>(out.values.size()) == samples * layout[s].width * 4);
      }
    }
    if (broadcast) {  // the secondary's one sample repeated as often as the primary's longest stream
      for (size_t i = 0; i < r.streams[2].lengths.size(); ++i)
        check(r.streams[2].lengths[i] == std::max(r.streams[0].lengths[i], r.streams[1].lengths[i]));
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
