// Fuzz target of the per-pixel tail of the image pipeline (libFuzzer entry point): the first bytes choose the view
// (size, channels, source type, strides with padding, mirroring), the operations (colour, saturation, mean, shift,
// normalisation, with parameters that may be extreme) and the output (type, CHW or HWC, channel order); the rest of the input
// fills the source pixels. The kernel must stay inside its buffers (the sanitizers watch), the AVX2 copy must give
// exactly the bytes of the baseline copy, and a uint8 output or one whose last operation clamps holds [0, 255].
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/native/image_pixels.hpp"
#include "fuzz_input.hpp"

namespace cntkio::image {
namespace portable {
void apply(const PixelSource& source, const std::vector<PixelOp>& ops, const PixelOutput& output);
}
#if defined(__GNUC__) && defined(__x86_64__)
namespace avx2 {
void apply(const PixelSource& source, const std::vector<PixelOp>& ops, const PixelOutput& output);
}
#endif
}  // namespace cntkio::image

using namespace cntkio::image;

namespace {

double value(ByteReader& in) { return (static_cast<double>(in.next(256)) - 64.0) / 32.0; }  // -2 .. 6

int64_t itemsize(PixelType type) { return type == PixelType::kUInt8 ? 1 : type == PixelType::kFloat32 ? 4 : 8; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader in{data, size};
  PixelSource source;
  source.height = 1 + in.next(9);
  source.width = 1 + in.next(9);
  source.channels = in.next(2) ? 3 : 1;
  source.type = static_cast<PixelType>(in.next(3));
  source.flip = in.next(2) != 0;
  const int64_t item = itemsize(source.type);
  const int64_t pad_cols = in.next(3), pad_rows = in.next(3);
  const bool planar = in.next(2) != 0;  // channel planes rather than interleaved pixels
  const int64_t cols = source.width + pad_cols, rows = source.height + pad_rows;
  std::vector<uint8_t> pixels(static_cast<size_t>(rows * cols * source.channels * item));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = in.at + i < size ? data[in.at + i] : static_cast<uint8_t>(i);
  if (planar) {
    source.channel_stride = rows * cols * item;
    source.row_stride = cols * item;
    source.col_stride = item;
  } else {
    source.channel_stride = item;
    source.col_stride = source.channels * item;
    source.row_stride = cols * source.channels * item;
  }
  source.data = pixels.data() + (pad_rows / 2) * source.row_stride + (pad_cols / 2) * source.col_stride;

  PixelOutput output;
  output.type = static_cast<PixelType>(in.next(3));
  output.chw = in.next(2) != 0;
  output.reverse_channels = in.next(2) != 0;
  const bool work_double = output.type == PixelType::kFloat64;
  const int64_t count = source.height * source.width * source.channels;
  std::vector<float> mean_float(static_cast<size_t>(count));
  std::vector<double> mean_double(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    mean_float[static_cast<size_t>(i)] = static_cast<float>(i % 200);
    mean_double[static_cast<size_t>(i)] = static_cast<double>(i % 200);
  }
  std::vector<PixelOp> ops(in.next(5));
  for (PixelOp& op : ops) {
    op.kind = static_cast<PixelOp::Kind>(1 + in.next(5));
    op.alpha = value(in);
    op.brightness = value(in);
    op.factor = std::fabs(value(in));
    for (double& shift : op.shift) shift = value(in) * 50.0;
    op.mean = work_double ? static_cast<const void*>(mean_double.data()) : mean_float.data();
    op.divisor = in.next(2) ? 255.0 : 1.0 / (1.0 + in.next(256));  // (the binding refuses divisors <= 0)
    for (int c = 0; c < 3; ++c) {
      op.offset[c] = value(in);
      op.deviation[c] = (1.0 + in.next(256)) / 64.0;  // 1/64 .. 4 (the binding refuses <= 0)
    }
  }
  const size_t bytes = static_cast<size_t>(count * itemsize(output.type));
  std::vector<uint8_t> baseline(bytes), fast(bytes);
  output.data = baseline.data();
  portable::apply(source, ops, output);
#if defined(__GNUC__) && defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    output.data = fast.data();
    avx2::apply(source, ops, output);
    check(std::memcmp(baseline.data(), fast.data(), bytes) == 0);
  }
#endif
  const bool clamped = !ops.empty() && (ops.back().kind == PixelOp::kBrightnessContrast ||
                                        ops.back().kind == PixelOp::kShiftClamp);
  if (clamped && output.type == PixelType::kFloat32) {
    for (size_t i = 0; i < bytes; i += 4) {
      float value;
      std::memcpy(&value, baseline.data() + i, 4);
      check(value >= 0.0f && value <= 255.0f);
    }
  }
  return 0;
}
