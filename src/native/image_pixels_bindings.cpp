// Python binding of the per-pixel tail of the image pipeline (image_pixels.hpp), registered into cntkio._native by
// module.cpp. Everything is checked here (types, shapes, strides, the operations); the GIL is released while the
// pixels are computed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "image_pixels.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using cntkio::image::PixelOp;
using cntkio::image::PixelType;
using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

template <class A>
PixelType pixel_type(const A& a, const char* what) {
  if (a.dtype() == nb::dtype<uint8_t>()) return PixelType::kUInt8;
  if (a.dtype() == nb::dtype<float>()) return PixelType::kFloat32;
  if (a.dtype() == nb::dtype<double>()) return PixelType::kFloat64;
  throw nb::type_error((std::string(what) + " must be uint8, float32 or float64").c_str());
}

// C-contiguous as NumPy means it: the strides of axes longer than 1 are those of a dense row-major array (a
// length-1 axis may have any stride, e.g. the 0 of `a[:, :, None]`).
template <class A>
bool c_contiguous(const A& a) {
  int64_t expected = 1;
  for (size_t axis = a.ndim(); axis-- > 0;) {
    if (a.shape(axis) > 1 && a.stride(axis) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(axis));
  }
  return true;
}

int64_t itemsize(PixelType type) { return type == PixelType::kUInt8 ? 1 : type == PixelType::kFloat32 ? 4 : 8; }

// A parameter the kernel divides by: > 0 and finite in the float working type too (no division by zero or infinity).
bool positive_float(double value) {
  const float narrow = static_cast<float>(value);
  return value > 0.0 && narrow > 0.0f && std::isfinite(narrow);
}

// (1, alpha, brightness) | (2, factor) | (3, mean array) | (4, shift0, shift1, shift2)
// | (5, divisor, offset0, offset1, offset2, deviation0, deviation1, deviation2)
PixelOp parse_op(nb::handle item, PixelType work, int64_t height, int64_t width, int64_t channels,
                 std::vector<AnyArray>& keep) {
  nb::tuple t = nb::cast<nb::tuple>(item);
  if (t.size() == 0) throw nb::value_error("empty pixel operation");
  PixelOp op;
  const int kind = nb::cast<int>(t[0]);
  auto need = [&](size_t n) {
    if (t.size() != n) throw nb::value_error("pixel operation with the wrong number of parameters");
  };
  switch (kind) {
    case PixelOp::kBrightnessContrast:
      need(3);
      op.kind = PixelOp::kBrightnessContrast;
      op.alpha = nb::cast<double>(t[1]);
      op.brightness = nb::cast<double>(t[2]);
      break;
    case PixelOp::kSaturation:
      need(2);
      op.kind = PixelOp::kSaturation;
      op.factor = nb::cast<double>(t[1]);
      if (!(op.factor >= 0.0)) throw nb::value_error("saturation factor must be >= 0");
      break;
    case PixelOp::kSubtractMean: {
      need(2);
      AnyArray mean = nb::cast<AnyArray>(t[1]);
      const bool shaped = mean.ndim() == 3 && static_cast<int64_t>(mean.shape(0)) == height &&
                          static_cast<int64_t>(mean.shape(1)) == width &&
                          static_cast<int64_t>(mean.shape(2)) == channels;
      if (!shaped || !c_contiguous(mean)) {
        throw nb::value_error("the mean image must be a C-contiguous height x width x channels array");
      }
      if (pixel_type(mean, "the mean image") != work) {
        throw nb::type_error("the mean image must be of the working type (float64 for float64 output, else float32)");
      }
      op.kind = PixelOp::kSubtractMean;
      op.mean = mean.data();
      keep.push_back(mean);
      break;
    }
    case PixelOp::kShiftClamp:
      need(4);
      op.kind = PixelOp::kShiftClamp;
      for (int c = 0; c < 3; ++c) op.shift[c] = nb::cast<double>(t[1 + c]);
      break;
    case PixelOp::kNormalize:
      need(8);
      op.kind = PixelOp::kNormalize;
      op.divisor = nb::cast<double>(t[1]);
      if (!positive_float(op.divisor)) throw nb::value_error("normalize divisor must be > 0 (and finite as float)");
      for (int c = 0; c < 3; ++c) {
        op.offset[c] = nb::cast<double>(t[2 + c]);
        op.deviation[c] = nb::cast<double>(t[5 + c]);
        if (!std::isfinite(static_cast<float>(op.offset[c]))) {
          throw nb::value_error("normalize mean must be finite (as float)");
        }
        if (!positive_float(op.deviation[c])) throw nb::value_error("normalize std must be > 0 (and finite as float)");
      }
      break;
    default:
      throw nb::value_error("unknown pixel operation");
  }
  return op;
}

void image_pixels(AnyArray source, bool flip, nb::list ops, OutArray out, bool chw, bool reverse_channels) {
  if (source.ndim() != 3) throw nb::value_error("source must be height x width x channels");
  cntkio::image::PixelSource src;
  src.type = pixel_type(source, "source");
  src.height = static_cast<int64_t>(source.shape(0));
  src.width = static_cast<int64_t>(source.shape(1));
  src.channels = static_cast<int64_t>(source.shape(2));
  if (src.height < 1 || src.width < 1) throw nb::value_error("empty source image");
  if (src.channels != 1 && src.channels != 3) throw nb::value_error("source must have 1 or 3 channels");
  const int64_t size = itemsize(src.type);
  if (source.stride(0) < 0 || source.stride(1) < 0 || source.stride(2) < 0) {
    throw nb::value_error("source strides must not be negative");
  }
  src.row_stride = source.stride(0) * size;
  src.col_stride = source.stride(1) * size;
  src.channel_stride = src.channels == 1 ? size : source.stride(2) * size;  // (a length-1 axis: any stride)
  src.data = static_cast<const uint8_t*>(source.data());
  src.flip = flip;

  cntkio::image::PixelOutput dst;
  dst.type = pixel_type(out, "out");
  dst.chw = chw;
  dst.reverse_channels = reverse_channels;
  const int64_t h = src.height, w = src.width, c = src.channels;
  const bool shaped = out.ndim() == 3 && (chw ? (static_cast<int64_t>(out.shape(0)) == c &&
                                                 static_cast<int64_t>(out.shape(1)) == h &&
                                                 static_cast<int64_t>(out.shape(2)) == w)
                                              : (static_cast<int64_t>(out.shape(0)) == h &&
                                                 static_cast<int64_t>(out.shape(1)) == w &&
                                                 static_cast<int64_t>(out.shape(2)) == c));
  if (!shaped) throw nb::value_error("out does not have the source's size in the requested layout");
  if (!c_contiguous(out)) throw nb::value_error("out must be C-contiguous");
  dst.data = static_cast<uint8_t*>(out.data());

  const PixelType work = dst.type == PixelType::kFloat64 ? PixelType::kFloat64 : PixelType::kFloat32;
  std::vector<AnyArray> keep;
  std::vector<PixelOp> parsed;
  parsed.reserve(ops.size());
  for (nb::handle item : ops) parsed.push_back(parse_op(item, work, h, w, c, keep));
  nb::gil_scoped_release release;
  cntkio::image::apply_pixel_ops(src, parsed, dst);
}

}  // namespace

void bind_image_pixels(nb::module_& m) {
  m.def("image_pixels", &image_pixels, "source"_a, "flip"_a, "ops"_a, "out"_a, "chw"_a, "reverse_channels"_a,
        "Applies the per-pixel image operations to a strided HWC view and writes the laid-out, cast result into "
        "`out`.");
}
