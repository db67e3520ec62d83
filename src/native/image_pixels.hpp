// The per-pixel tail of the image transform pipeline (spec/image.md §4.3-§4.5 and the output layout): colour
// (brightness, contrast, saturation), mean subtraction, PCA intensity noise and normalisation (cntkio's
// `transforms.normalize`), then the cast and the CHW/HWC, BGR/RGB layout, in one pass over the rows of an image.
// Pure C++ (no Python): bound in image_pixels_bindings.cpp, driven by cntkio/formats/image_pipeline.py, which draws
// the random parameters and does the resampling (OpenCV).
//
// The source is a strided HWC view (a crop of a decoded image: uint8, float32 or float64, 1 or 3 channels), read
// mirrored left-right when `flip`. Each row is loaded into one plane per channel of the working type (float, or
// double for float64 output), the operations run over the planes in order (loops the compiler vectorises), and
// the row is written out. Brightness needs the mean of the image as the operation sees it: a first pass computes
// it (from the source directly when the operation comes first).
//
// Saturation is OpenCV's float BGR->HSV, S *= factor, S capped at 1, HSV->BGR round trip in closed form: with
// v = max, m = min, d = v - m of a pixel, S = d / (|v| + FLT_EPSILON), and every channel c becomes
// v * (1 - min(S * factor, 1) * (v - c) / d) (unchanged when d = 0). This equals OpenCV's round trip to float
// rounding, negative values (after a mean subtraction) included, and stays in [0, v] when v >= 0.
#pragma once

#include <cstdint>
#include <vector>

namespace cntkio::image {

enum class PixelType : int { kUInt8 = 0, kFloat32 = 1, kFloat64 = 2 };

struct PixelOp {
  enum Kind : int {
    kBrightnessContrast = 1,  // p = clamp(p * alpha + brightness * mean(image), 0, 255)
    kSaturation = 2,          // HSV saturation times `factor` (3 channels only; ignored otherwise)
    kSubtractMean = 3,        // p -= mean[row][col][channel] (`mean`: height x width x channels of the working type)
    kShiftClamp = 4,          // p = clamp(p + shift[channel], 0, 255) (channel in memory order)
    kNormalize = 5,           // p = (p / divisor - offset[channel]) / deviation[channel] (channel in memory order;
                              // IEEE divisions, no reciprocals: torchvision's ToTensor + Normalize to the bit)
  };
  Kind kind = kBrightnessContrast;
  double alpha = 1.0;
  double brightness = 0.0;
  double factor = 1.0;
  double shift[3] = {0.0, 0.0, 0.0};
  const void* mean = nullptr;
  double divisor = 1.0;                  // kNormalize (> 0; 1 skips the division, which would change nothing)
  double offset[3] = {0.0, 0.0, 0.0};    // kNormalize
  double deviation[3] = {1.0, 1.0, 1.0};  // kNormalize (> 0)
};

// A strided height x width x channels view; strides in bytes (non-negative).
struct PixelSource {
  const uint8_t* data = nullptr;
  PixelType type = PixelType::kUInt8;
  int64_t height = 0, width = 0, channels = 0;
  int64_t row_stride = 0, col_stride = 0, channel_stride = 0;
  bool flip = false;  // read each row right to left
};

// A C-contiguous output: channels x height x width (chw) or height x width x channels, channel order reversed when
// `reverse_channels` (BGR -> RGB). uint8 output is rounded to nearest (ties to even) and saturated.
struct PixelOutput {
  uint8_t* data = nullptr;
  PixelType type = PixelType::kFloat32;
  bool chw = true;
  bool reverse_channels = false;
};

// Applies `ops` to `source` and writes `output` (same height, width and channels). The working type is double when
// the output is float64, else float; mean images must be of the working type. No Python, no exceptions.
void apply_pixel_ops(const PixelSource& source, const std::vector<PixelOp>& ops, const PixelOutput& output);

}  // namespace cntkio::image
