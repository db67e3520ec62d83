// The per-pixel tail of the image pipeline: see image_pixels.hpp. The kernel (image_pixels_kernel.inc) is compiled
// twice on x86-64, for the baseline instruction set and for AVX2, and the AVX2 copy is used when the processor has
// it. Both give the same values: no fused multiply-add, the same order of every sum.
#include "image_pixels.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace cntkio::image {

namespace portable {
#include "image_pixels_kernel.inc"
}  // namespace portable

#if defined(__GNUC__) && defined(__x86_64__)
#define CNTKIO_PIXELS_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "image_pixels_kernel.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

void apply_pixel_ops(const PixelSource& source, const std::vector<PixelOp>& ops, const PixelOutput& output) {
#ifdef CNTKIO_PIXELS_AVX2
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  if (has_avx2) return avx2::apply(source, ops, output);
#endif
  portable::apply(source, ops, output);
}

}  // namespace cntkio::image
