// Fuzz target of the native minibatch assembly (libFuzzer entry point): chunks built from the input bytes
// (sequence offsets, CSR arrays, indices, invalid-sequence flags) must either be refused by `validate` or
// gather any request without reading out of bounds; a gathered minibatch's arrays must be consistent.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "../src/native/assemble.hpp"

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

void check(bool condition) {
  if (!condition) std::abort();
}

struct Owned {
  std::vector<int64_t> seq_offsets, indptr;
  std::vector<float> values;
  std::vector<int32_t> indices;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  const std::vector<ColumnSpec> layout = {{false, 3, 4}, {true, 20, 4}};
  const int64_t sequences = 1 + in.next(12);
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
      for (int64_t r = 0; r < samples; ++r) o.indptr.push_back(o.indptr.back() + in.next(4) - (in.next(32) == 0));
      c.nnz = std::max<int64_t>(0, o.indptr.back());
      o.values.resize(static_cast<size_t>(c.nnz), 1.0f);
      for (int64_t k = 0; k < c.nnz; ++k) o.indices.push_back(static_cast<int32_t>(in.next(22)) - 1);
      c.indptr = o.indptr.data();
      c.indices = o.indices.data();
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
    return 0;  // refused at the boundary: never gathered
  }
  Slot slot;
  slot.chunk = chunk;
  slot.row0 = in.next(2);
  slot.first_unit = 100;
  const UnitKind kind = static_cast<UnitKind>(in.next(3));
  if (kind == UnitKind::frames) {
    slot.frame_starts.push_back(0);
    for (int64_t q = slot.row0; q < sequences; ++q) slot.frame_starts.push_back(slot.frame_starts.back() + 1 + in.next(3));
  }
  const std::vector<const Slot*> slots = {&slot};
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
  try {
    const GatherResult r = gather(slots, request, layout);
    if (r.short_unit >= 0) return 0;
    for (size_t s = 0; s < layout.size(); ++s) {
      const StreamOut& out = r.streams[s];
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
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
