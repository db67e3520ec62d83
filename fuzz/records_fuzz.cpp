// Fuzz target of the record framing (libFuzzer entry point): the input, read as a length-prefixed file and as
// a TFRecord file through an in-memory reader with a small block, is walked into records. The walk must stay
// inside the input, give consecutive records that each fit, end exactly at the end of the input unless it
// reports an error at the first record that does not fit; the data CRCs of the TFRecords found are checked
// without reading outside the buffer, and the SSE4.2 CRC agrees with the table one.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/native/records.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::records;

namespace {

void walk_and_check(const uint8_t* data, size_t size, Framing framing, int64_t block) {
  const auto end = static_cast<int64_t>(size);
  int64_t reads = 0;
  ReadFn read = [&](int64_t offset, int64_t want, char* out) -> int64_t {
    check(offset >= 0 && want > 0 && want <= std::max<int64_t>(block, 64));
    ++reads;
    const int64_t n = std::max<int64_t>(0, std::min(want, end - offset));
    if (n > 0) std::memcpy(out, data + offset, static_cast<size_t>(n));
    return n;
  };
  const WalkResult r = walk(read, 0, end, framing, block);
  const int64_t header = header_bytes(framing), trailer = trailer_bytes(framing);
  int64_t at = 0;
  for (const int64_t start : r.starts) {
    check(start == at);
    check(end - start >= header + trailer);
    const uint64_t length = load_u64le(data + start);
    check(length <= static_cast<uint64_t>(end - start - header - trailer));
    if (framing == Framing::TFRecord) check(mask_crc(crc32c(data + start, 8)) == load_u32le(data + start + 8));
    at = start + header + static_cast<int64_t>(length) + trailer;
  }
  if (r.error.empty()) {
    check(at == end && r.error_offset == -1);
  } else {
    check(r.error_offset == at && at < end);
  }
  check(reads <= end / std::max<int64_t>(header, 1) + 2);
  if (framing == Framing::TFRecord) {
    const std::vector<int64_t> bad = bad_data_crcs(data, end, r.starts.data(), static_cast<int64_t>(r.starts.size()));
    for (size_t k = 1; k < bad.size(); ++k) check(bad[k] > bad[k - 1]);
    for (const int64_t i : bad) check(i >= 0 && i < static_cast<int64_t>(r.starts.size()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(crc32c(data, size) == crc32c_portable(data, size));
  const int64_t block = 64 + (size ? data[0] % 64 : 0);
  walk_and_check(data, size, Framing::LengthPrefixed, block);
  walk_and_check(data, size, Framing::TFRecord, block);
  // A well-formed TFRecord file built from the input (records cut at '\n'): the walk finds every record.
  std::vector<uint8_t> file;
  size_t start = 0, records = 0;
  while (start <= size && records < 64) {
    const uint8_t* nl = static_cast<const uint8_t*>(start < size ? std::memchr(data + start, '\n', size - start) : nullptr);
    const size_t stop = nl ? static_cast<size_t>(nl - data) : size;
    uint8_t head[12];
    const uint64_t length = stop - start;
    for (int k = 0; k < 8; ++k) head[k] = static_cast<uint8_t>(length >> (8 * k));
    const uint32_t lc = mask_crc(crc32c(head, 8)), dc = mask_crc(crc32c(data + start, length));
    for (int k = 0; k < 4; ++k) head[8 + k] = static_cast<uint8_t>(lc >> (8 * k));
    file.insert(file.end(), head, head + 12);
    file.insert(file.end(), data + start, data + stop);
    for (int k = 0; k < 4; ++k) file.push_back(static_cast<uint8_t>(dc >> (8 * k)));
    ++records;
    start = stop + 1;
  }
  const auto n = static_cast<int64_t>(file.size());
  const WalkResult r = walk(
      [&](int64_t offset, int64_t want, char* out) -> int64_t {
        const int64_t got = std::max<int64_t>(0, std::min(want, n - offset));
        if (got > 0) std::memcpy(out, file.data() + offset, static_cast<size_t>(got));
        return got;
      },
      0, n, Framing::TFRecord, block);
  check(r.error.empty() && r.starts.size() == records);
  check(bad_data_crcs(file.data(), n, r.starts.data(), static_cast<int64_t>(r.starts.size())).empty());
  return 0;
}
