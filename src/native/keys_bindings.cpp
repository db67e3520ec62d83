// Python bindings of the key join (keys.hpp), registered into cntkio._native by module.cpp: joining two key columns,
// finding a column's duplicate keys and CNTK's sequence-key hash, each with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "keys.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace cntkio;
using namespace cntkio::bindings;

namespace {

// A key column from Python: (0, int64 values, None), (1, uint64 values, None) or (2, UTF-8 blob, offsets).
// The arrays stay referenced by the caller's arguments for the duration of the call.
keys::Column to_key_column(const nb::tuple& spec) {
  if (nb::len(spec) != 3) throw nb::value_error("a key column is (kind, values or blob, offsets or None)");
  const int kind = nb::cast<int>(spec[0]);
  keys::Column c;
  if (kind == 0 || kind == 1) {
    U64Array values = exact_array<U64Array>(spec[1], "integer keys (uint64; int64 viewed as uint64)");
    c.kind = kind == 0 ? keys::Column::Kind::signed_int : keys::Column::Kind::unsigned_int;
    c.ints = values.data();
    c.size = static_cast<int64_t>(values.shape(0));
  } else if (kind == 2) {
    ByteArray blob = exact_array<ByteArray>(spec[1], "text keys (uint8 blob)");
    OffsetArray offsets = exact_array<OffsetArray>(spec[2], "text key offsets (int64)");
    if (offsets.shape(0) == 0) throw nb::value_error("text keys need offsets");
    const int64_t* o = offsets.data();
    const int64_t n = static_cast<int64_t>(offsets.shape(0)) - 1;
    for (int64_t i = 0; i < n; ++i) {
      if (o[i] < 0 || o[i + 1] < o[i] || o[i + 1] > static_cast<int64_t>(blob.shape(0)))
        throw nb::value_error("text key offsets outside the blob");
    }
    c.kind = keys::Column::Kind::text;
    c.blob = blob.data();
    c.offsets = o;
    c.size = n;
  } else {
    throw nb::value_error("unknown key column kind");
  }
  return c;
}

nb::tuple duplicates_to_python(keys::Duplicates&& d) {
  return nb::make_tuple(d.count, to_numpy(std::move(d.examples)));
}

// Joins two key columns: (row of the secondary per primary key or -1 as int32 or int64, duplicate
// count of the secondary, the first duplicate rows).
nb::tuple join_keys(const nb::tuple& primary, const nb::tuple& secondary, bool by_text, bool keep_last) {
  const keys::Column p = to_key_column(primary), s = to_key_column(secondary);
  if (!by_text && (p.kind == keys::Column::Kind::text || s.kind == keys::Column::Kind::text))
    throw nb::value_error("text keys compare as text");
  keys::Join j;
  {
    nb::gil_scoped_release release;
    j = keys::join(p, s, by_text ? keys::Compare::text : keys::Compare::value, keep_last);
  }
  nb::object match = s.size < INT32_MAX ? nb::cast(to_numpy(std::move(j.match32))) : nb::cast(to_numpy(std::move(j.match64)));
  return nb::make_tuple(match, j.duplicates.count, to_numpy(std::move(j.duplicates.examples)));
}

nb::tuple key_duplicates(const nb::tuple& column, bool by_text) {
  const keys::Column c = to_key_column(column);
  if (!by_text && c.kind == keys::Column::Kind::text) throw nb::value_error("text keys compare as text");
  keys::Duplicates d;
  {
    nb::gil_scoped_release release;
    d = keys::duplicates(c, by_text ? keys::Compare::text : keys::Compare::value);
  }
  return duplicates_to_python(std::move(d));
}

nb::ndarray<nb::numpy, uint64_t> cntk_key_hash(const nb::tuple& column) {
  const keys::Column c = to_key_column(column);
  std::vector<uint64_t> hashes;
  {
    nb::gil_scoped_release release;
    hashes = keys::cntk_hash(c);
  }
  return to_numpy(std::move(hashes));
}

}  // namespace

void bind_keys(nb::module_& m) {
  m.def("join_keys", &join_keys, "primary"_a, "secondary"_a, "by_text"_a, "keep_last"_a,
        "Join key columns (kind, values|blob, offsets|None) with a hash table (GIL released): (match, "
        "duplicates in the secondary, first duplicate rows).");
  m.def("key_duplicates", &key_duplicates, "column"_a, "by_text"_a,
        "Keys of a column that occur more than once: (count, first duplicate rows).");
  m.def("cntk_key_hash", &cntk_key_hash, "column"_a, "CNTK's 64-bit sequence-key hash of every key's text.");
}
