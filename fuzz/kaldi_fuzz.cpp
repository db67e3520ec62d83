// Fuzz target of the Kaldi matrix reader (libFuzzer entry point): the input, in a memfd, is read as a binary
// Kaldi archive, its matrices found as the deserializer scans one (key, space, header, data skipped by its size):
// scan_archive finds the keys, offsets and stop (where and why) of a plain model scan, for short and long keys.
// Parsing a header never crashes; every matrix found whole inside the file decodes, the same as float32 and as
// float64 (the float64 values rounded are the float32 ones), with a context window whose centre block is the frame;
// a matrix running past the end, or indexed with another kind or row count, is a BadMatrix error naming it, at an
// offset inside the file.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../src/native/kaldi.hpp"
#include "fuzz_input.hpp"
#include "memory_file.hpp"

using namespace cntkio::kaldi;

namespace {

constexpr int64_t kMaxValues = int64_t{1} << 18;  // larger matrices are only parsed, not decoded

bool same(float a, double b) { return std::isnan(a) ? std::isnan(b) : static_cast<float>(b) == a; }

// The archive scanned one matrix after the other, from memory: what scan_archive must find.
ArchiveScan model_scan(const uint8_t* data, int64_t size, size_t max_key) {
  ArchiveScan f;
  for (int64_t position = 0; position < size;) {
    int64_t space = position;
    while (space < size && space - position <= static_cast<int64_t>(max_key) && data[space] != ' ') ++space;
    bool key = space < size && data[space] == ' ' && space > position &&
               space - position <= static_cast<int64_t>(max_key);
    for (int64_t i = position; key && i < space; ++i)
      key = data[i] != 0 && data[i] != '\n' && data[i] != '\t' && data[i] != '\r';
    if (!key) {
      f.stop = ArchiveScan::kNoKey;
      f.stop_offset = position;
      break;
    }
    const int64_t offset = space + 1;
    Header h;
    try {
      h = parse_header(data + offset, static_cast<size_t>(std::min<int64_t>(size - offset, kMaxHeaderBytes)));
    } catch (const BadHeader&) {
      f.stop = ArchiveScan::kBadHeader;
      f.stop_offset = offset;
      break;
    }
    f.key_blob.insert(f.key_blob.end(), data + position, data + space);
    f.key_offsets.push_back(static_cast<int64_t>(f.key_blob.size()));
    f.offsets.push_back(offset);
    if (h.data_bytes > size - offset - h.header_bytes) break;
    position = offset + h.header_bytes + h.data_bytes;
  }
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int64_t file_size = static_cast<int64_t>(size);
  if (size > 0) {
    const int scanned = memory_file("kaldi-scan", data, size);
    if (scanned >= 0) {
      for (size_t max_key : {size_t{8}, size_t{300}}) {
        const ArchiveScan got = scan_archive(scanned, file_size, max_key), want = model_scan(data, file_size, max_key);
        check(got.key_blob == want.key_blob && got.key_offsets == want.key_offsets && got.offsets == want.offsets);
        check(got.stop == want.stop && got.stop_offset == want.stop_offset);
      }
      close(scanned);
    }
  }
  std::vector<Matrix> whole, past_end;
  int64_t cols = -1;
  for (int64_t position = 0; position < file_size;) {
    int64_t space = position;
    while (space < file_size && space - position < 256 && data[space] != ' ') ++space;
    if (space >= file_size || data[space] != ' ' || space == position) break;
    const int64_t offset = space + 1;
    const size_t available = static_cast<size_t>(std::min<int64_t>(file_size - offset, kMaxHeaderBytes));
    Header h;
    try {
      h = parse_header(data + offset, available);
    } catch (const BadHeader&) {
      break;
    }
    check(h.rows >= 0 && h.cols >= 0 && h.header_bytes >= 15 && h.header_bytes <= int64_t{kMaxHeaderBytes});
    check(h.data_bytes >= 0 && h.kind >= kFloat && h.kind <= kOneByte);
    if (cols < 0) cols = h.cols;
    const bool small = h.rows * h.cols <= kMaxValues;
    if (h.cols == cols && h.cols > 0 && small) {
      const bool fits = h.data_bytes <= file_size - offset - h.header_bytes;
      (fits ? whole : past_end).push_back({0, offset, h.kind, h.rows});
    }
    if (h.data_bytes > file_size - offset - h.header_bytes) break;
    position = offset + h.header_bytes + h.data_bytes;
  }
  if (whole.empty() && past_end.empty()) return 0;
  const int fd = memory_file("kaldi", data, size);
  if (fd < 0) return 0;
  const std::vector<int> fds{fd};
  int64_t total = 0;
  std::vector<int64_t> seq_offsets{0};
  for (const Matrix& m : whole) {
    total += m.rows;
    seq_offsets.push_back(total);
  }
  std::vector<float> single(static_cast<size_t>(total * cols));
  std::vector<double> twice(static_cast<size_t>(total * cols));
  read_matrices<float>(fds, whole, cols, single.data());
  read_matrices<double>(fds, whole, cols, twice.data());
  for (size_t i = 0; i < single.size(); ++i) check(same(single[i], twice[i]));
  const int left = static_cast<int>(size % 3), right = static_cast<int>(size % 2);
  const int64_t width = cols * (1 + left + right);
  std::vector<float> expanded(static_cast<size_t>(total * width));
  expand_context<float>(single.data(), cols, seq_offsets.data(), static_cast<int64_t>(whole.size()), left, right,
                        expanded.data());
  for (int64_t t = 0; t < total; ++t) {
    check(std::memcmp(expanded.data() + t * width + left * cols, single.data() + t * cols,
                      sizeof(float) * static_cast<size_t>(cols)) == 0);
  }
  for (const Matrix& m : past_end) {
    std::vector<float> out(static_cast<size_t>(m.rows * cols));
    try {
      read_matrices<float>(fds, {m}, cols, out.data());
      check(false);
    } catch (const BadMatrix& e) {
      check(e.matrix == 0 && e.offset >= m.offset && e.offset <= file_size);
    }
  }
  if (whole.size() >= 2) {  // the last one indexed with another row count: refused, naming it, after the others
    std::vector<Matrix> wrong = whole;
    wrong.back().rows += 1;
    std::vector<float> out(static_cast<size_t>((total + 1) * cols));
    try {
      read_matrices<float>(fds, wrong, cols, out.data());
      check(false);
    } catch (const BadMatrix& e) {
      check(e.matrix == static_cast<int64_t>(wrong.size()) - 1 && e.offset >= wrong.back().offset);
    }
  }
  if (!whole.empty()) {  // indexed with another row count: refused
    Matrix wrong = whole.front();
    wrong.rows += 1;
    std::vector<float> out(static_cast<size_t>(wrong.rows * cols));
    try {
      read_matrices<float>(fds, {wrong}, cols, out.data());
      check(false);
    } catch (const BadMatrix& e) {
      check(e.matrix == 0 && e.offset == wrong.offset);
    }
  }
  close(fd);
  return 0;
}
