// Fuzz target of the image map and base64 image file scanners and of the base64 decoder (libFuzzer entry point).
// The input is scanned as it is, with every ' ' and '|' made a tab, and as the recipe of a map file and of a base64
// file whose lines are mostly well formed (so that mutations of the other formats' seeds reach every rule). Each scan runs with a small block (lines crossing blocks) and a large one, with and
// without a label dimension. The scans must not crash, and: the columns have consistent sizes, ids point into the
// distinct texts (which are distinct and not empty), lines ascend and exist, labels are -1 or below the dimension,
// payload ranges lie in their line; both block sizes agree; a scan with labels that succeeds gives the same rows
// as one without; a fatal error names a position in the input. The decoder must agree with a slow reference on
// the input and on every payload, and decode a reference encoding of the input back to the input; the batch
// decoder must agree with the one-at-a-time decoder.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../src/native/image_index.hpp"
#include "memory_file.hpp"
#include "fuzz_input.hpp"

using namespace cntkio::image;

namespace {

constexpr const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int value_of(uint8_t c) {
  const char* p = c == 0 ? nullptr : std::strchr(kAlphabet, c);
  return p == nullptr ? -1 : static_cast<int>(p - kAlphabet);
}

// A slow reference decoder: trailing bytes outside the alphabet and '=' dropped; then a multiple of 4, alphabet
// characters only, except one or two '=' at the very end.
bool reference_decode(const uint8_t* data, size_t n, std::vector<uint8_t>& out) {
  while (n > 0 && value_of(data[n - 1]) < 0 && data[n - 1] != '=') --n;
  out.clear();
  if (n % 4 != 0) return false;
  size_t pad = 0;
  while (pad < n && data[n - 1 - pad] == '=') ++pad;
  if (pad > 2) return false;
  uint32_t bits = 0;
  int count = 0;
  for (size_t i = 0; i < n - pad; ++i) {
    const int v = value_of(data[i]);
    if (v < 0) return false;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<uint8_t>(bits >> count));
      bits &= (1u << count) - 1;
    }
  }
  return true;
}

std::string reference_encode(const uint8_t* data, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t a = data[i], b = i + 1 < n ? data[i + 1] : 0, c = i + 2 < n ? data[i + 2] : 0;
    const uint32_t word = (a << 16) | (b << 8) | c;
    out += kAlphabet[(word >> 18) & 63];
    out += kAlphabet[(word >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(word >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[word & 63] : '=';
  }
  return out;
}

void check_decoder(const uint8_t* data, size_t n) {
  std::vector<uint8_t> expected, out(n / 4 * 3 + 3);
  const bool valid = reference_decode(data, n, expected);
  const size_t trimmed = base64_trim(data, n);
  const int64_t written = base64_decode(data, trimmed, out.data());
  check(valid == (written >= 0));
  if (valid) check(static_cast<size_t>(written) == expected.size() &&
                   (expected.empty() || std::memcmp(out.data(), expected.data(), expected.size()) == 0));
}

std::string_view piece(const std::vector<uint8_t>& blob, const std::vector<int64_t>& offsets, size_t i) {
  return {reinterpret_cast<const char*>(blob.data()) + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i])};
}

void check_texts(const std::vector<uint8_t>& blob, const std::vector<int64_t>& offsets) {
  check(!offsets.empty() && offsets.front() == 0 && offsets.back() == static_cast<int64_t>(blob.size()));
  std::set<std::string_view> seen;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    check(offsets[i + 1] > offsets[i]);  // never empty
    check(seen.insert(piece(blob, offsets, i)).second);
  }
}

void check_fatal(const Fatal& f, const uint8_t* data, int64_t size, int64_t newlines) {
  check(f.offset >= 0 && f.offset <= size && f.line >= 1 && f.line <= newlines + 1 && f.column >= 1);
  int64_t line_start = f.offset;
  while (line_start > 0 && data[line_start - 1] != '\n') --line_start;
  check(f.column <= f.offset - line_start + 1);
  check(f.has_detail == (f.message.find("{}") != std::string::npos));
}

struct MapRun {
  bool ok;
  Fatal fatal;
  MapResult r;
};

MapRun run_map(int fd, int64_t size, int64_t dim, int64_t block) {
  MapOptions options;
  options.directory = "/map/dir";
  options.label_dim = dim;
  options.block_size = block;
  MapRun run;
  run.ok = scan_map(fd, size, options, run.r, run.fatal);
  return run;
}

void check_map(const MapRun& run, const uint8_t* data, int64_t size, int64_t dim) {
  const MapResult& r = run.r;
  const size_t n = r.lines.size();
  const int64_t newlines = static_cast<int64_t>(std::count(data, data + size, '\n'));
  check(r.path_ids.size() == n && r.container_ids.size() == n && r.labels.size() == n && r.offsets.size() == n);
  check(r.columns == 0 || r.columns == 2 || r.columns == 3);
  check(r.columns == 3 ? r.key_offsets.size() == n + 1 && r.key_index.empty() : r.key_index.size() == n && r.key_offsets.size() == 1);
  check(r.key_offsets.back() == static_cast<int64_t>(r.key_blob.size()));
  check_texts(r.path_blob, r.path_offsets);
  check_texts(r.container_blob, r.container_offsets);
  const auto paths = static_cast<int32_t>(r.path_offsets.size() - 1), containers = static_cast<int32_t>(r.container_offsets.size() - 1);
  for (size_t i = 0; i < n; ++i) {
    check(r.path_ids[i] >= 0 && r.path_ids[i] < paths);
    check(r.container_ids[i] >= -1 && r.container_ids[i] < containers);
    check(dim < 0 ? r.labels[i] == -1 : r.labels[i] >= 0 && r.labels[i] < dim);
    check(r.lines[i] >= 1 && r.lines[i] <= newlines + 1 && r.offsets[i] >= 0 && r.offsets[i] < size);
    if (i > 0) check(r.lines[i] > r.lines[i - 1] && r.offsets[i] > r.offsets[i - 1]);
    if (r.columns == 2) check(r.key_index[i] == r.lines[i] - 1);
    if (r.columns == 3) check(r.key_offsets[i + 1] > r.key_offsets[i]);
  }
  if (!run.ok) check_fatal(run.fatal, data, size, newlines);
}

bool same_map(const MapRun& a, const MapRun& b, bool labels) {
  return a.r.columns == b.r.columns && a.r.key_blob == b.r.key_blob && a.r.key_offsets == b.r.key_offsets &&
         a.r.key_index == b.r.key_index && a.r.path_blob == b.r.path_blob && a.r.path_offsets == b.r.path_offsets &&
         a.r.path_ids == b.r.path_ids && a.r.container_blob == b.r.container_blob &&
         a.r.container_offsets == b.r.container_offsets && a.r.container_ids == b.r.container_ids &&
         (!labels || a.r.labels == b.r.labels) && a.r.lines == b.r.lines && a.r.offsets == b.r.offsets;
}

bool same_fatal(const Fatal& a, const Fatal& b) {
  return a.message == b.message && a.detail == b.detail && a.key == b.key && a.has_key == b.has_key &&
         a.key_index == b.key_index && a.offset == b.offset && a.line == b.line && a.column == b.column;
}

struct Base64Run {
  bool ok;
  Fatal fatal;
  Base64Result r;
};

Base64Run run_base64(int fd, int64_t size, int64_t dim, int64_t block) {
  Base64Options options;
  options.label_dim = dim;
  options.block_size = block;
  Base64Run run;
  run.ok = scan_base64(fd, size, options, run.r, run.fatal);
  return run;
}

void check_base64(int fd, const Base64Run& run, const uint8_t* data, int64_t size, int64_t dim) {
  const Base64Result& r = run.r;
  const size_t n = r.lines.size();
  const int64_t newlines = static_cast<int64_t>(std::count(data, data + size, '\n'));
  check(r.labels.size() == n && r.payload_offsets.size() == n && r.payload_lengths.size() == n && r.offsets.size() == n);
  if (!run.ok) {
    check_fatal(run.fatal, data, size, newlines);
    return;
  }
  if (r.numeric_keys) {
    check(r.key_values.size() == n && r.key_offsets.size() == 1);
  } else {
    check(r.has_keys && r.key_values.empty() && r.key_offsets.size() == n + 1);
  }
  for (size_t i = 0; i < n; ++i) {
    check(dim < 0 ? r.labels[i] == -1 : r.labels[i] >= 0 && r.labels[i] < dim);
    check(r.lines[i] >= 1 && r.lines[i] <= newlines + 1 && r.offsets[i] >= 0);
    if (!r.has_keys) check(r.key_values[i] == static_cast<uint64_t>(r.lines[i] - 1));
    const int64_t begin = r.payload_offsets[i], end = begin + r.payload_lengths[i];
    check(begin > r.offsets[i] && data[begin - 1] == '\t' && end <= size && (end == size || data[end] == '\n'));
    check(std::memchr(data + begin, '\n', static_cast<size_t>(end - begin)) == nullptr);
    check(std::memchr(data + begin, '\t', static_cast<size_t>(end - begin)) == nullptr);
    if (i > 0) {
      check(r.lines[i] > r.lines[i - 1]);
      if (r.has_keys && r.numeric_keys) check(r.key_values[i] != r.key_values[i - 1]);
      if (r.has_keys && !r.numeric_keys) check(piece(r.key_blob, r.key_offsets, i) != piece(r.key_blob, r.key_offsets, i - 1));
    }
    check_decoder(data + begin, static_cast<size_t>(end - begin));
  }
  // The batch decoder agrees with the one-at-a-time decoder, in file order (one read) and reversed (one per row).
  for (int reversed = 0; reversed < 2; ++reversed) {
    std::vector<int64_t> offsets(r.payload_offsets), lengths(r.payload_lengths);
    if (reversed) {
      std::reverse(offsets.begin(), offsets.end());
      std::reverse(lengths.begin(), lengths.end());
    }
    const DecodedBatch batch = decode_batch(fd, offsets.data(), lengths.data(), n);
    check(batch.ok.size() == n && batch.out_offsets.size() == n + 1);
    check(batch.out_offsets.back() == static_cast<int64_t>(batch.blob.size()));
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t> expected;
      const bool valid = reference_decode(data + offsets[i], static_cast<size_t>(lengths[i]), expected);
      check(batch.ok[i] == (valid ? 1 : 0));
      const int64_t b = batch.out_offsets[i], e = batch.out_offsets[i + 1];
      check(e - b == (valid ? static_cast<int64_t>(expected.size()) : 0));
      if (valid && !expected.empty()) check(std::memcmp(batch.blob.data() + b, expected.data(), expected.size()) == 0);
    }
  }
}

void scan_all(const uint8_t* data, size_t size) {
  const int fd = memory_file("image", data, size);
  if (fd < 0) return;
  const auto n = static_cast<int64_t>(size);
  for (const int64_t dim : {int64_t{-1}, int64_t{7}}) {
    const MapRun small = run_map(fd, n, dim, 256), large = run_map(fd, n, dim, 1 << 16);
    check_map(small, data, n, dim);
    check(small.ok == large.ok && same_map(small, large, true) && same_fatal(small.fatal, large.fatal));
    const Base64Run b_small = run_base64(fd, n, dim, 256), b_large = run_base64(fd, n, dim, 1 << 16);
    check_base64(fd, b_small, data, n, dim);
    check(b_small.ok == b_large.ok && same_fatal(b_small.fatal, b_large.fatal));
    check(b_small.r.key_values == b_large.r.key_values && b_small.r.payload_offsets == b_large.r.payload_offsets);
  }
  const MapRun labelled = run_map(fd, n, 7, 4096), unlabelled = run_map(fd, n, -1, 4096);
  if (labelled.ok) check(unlabelled.ok && same_map(labelled, unlabelled, false));
  const Base64Run b_labelled = run_base64(fd, n, 7, 4096), b_unlabelled = run_base64(fd, n, -1, 4096);
  if (b_labelled.ok) check(b_unlabelled.ok && b_labelled.r.payload_offsets == b_unlabelled.r.payload_offsets);
  close(fd);
}

// A map file (or base64 file) built from the input, so that most lines are well formed: the bytes choose the shape of
// each line (keys, "...", '@', a label up to 8, blank lines, '\r', corrupt base64) and give the text of its fields.
std::string structured(const uint8_t* data, size_t size, bool base64) {
  std::string out;
  size_t i = 0;
  auto next = [&]() -> uint8_t { return i < size ? data[i++] : 0; };
  auto text = [&](size_t most) {
    std::string t;
    const size_t length = next() % most;
    for (size_t k = 0; k < length && i < size; ++k) {
      char c = static_cast<char>(data[i++]);
      if (c == '\n' || c == '\t') c = '_';
      t += c;
    }
    return t;
  };
  const bool keys = (next() & 1) != 0;
  if (next() % 8 == 0) out += "\xef\xbb\xbf";
  while (i < size) {
    const uint8_t shape = next();
    if (shape % 16 == 0) {
      out += shape & 16 ? "\n" : " \r\n";
      continue;
    }
    if (keys) {
      out += shape & 16 ? std::to_string(next() % 5) : text(8);
      out += '\t';
    }
    if (base64) {
      out += std::to_string(next() % 9);
      out += '\t';
      const std::string raw = text(40);
      const std::string encoded = reference_encode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
      out += encoded;
      if (shape & 32) {  // a few bytes inserted into the payload, or after it
        const size_t back = std::min<size_t>(next() % 8, encoded.size());
        out.insert(out.size() - back, text(3));
      }
    } else {
      if (shape & 32) out += "...";
      out += text(12);
      if (shape & 64) {
        out += '@';
        out += text(10);
      }
      out += '\t';
      out += std::to_string(next() % 9);
    }
    if (shape & 128) out += '\r';
    out += '\n';
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  scan_all(data, size);
  std::vector<uint8_t> tabbed(data, data + size);
  for (uint8_t& c : tabbed) {
    if (c == ' ' || c == '|') c = '\t';
  }
  scan_all(tabbed.data(), tabbed.size());
  for (const bool base64 : {false, true}) {
    const std::string text = structured(data, size, base64);
    scan_all(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }
  check_decoder(data, size);
  const std::string encoded = reference_encode(data, size);
  std::vector<uint8_t> out(encoded.size() / 4 * 3);
  const auto* e = reinterpret_cast<const uint8_t*>(encoded.data());
  const int64_t written = base64_decode(e, base64_trim(e, encoded.size()), out.data());
  check(written == static_cast<int64_t>(size) && (size == 0 || std::memcmp(out.data(), data, size) == 0));
  return 0;
}
