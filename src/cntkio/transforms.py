"""Image transforms (``cntk.io.transforms``): crop, scale, mean, color, intensity.

The public face of ``cntkio._src.formats.image_transforms``."""

from cntkio._src.formats.image_transforms import (
    Color,
    Crop,
    ImageTransform,
    Intensity,
    Mean,
    Scale,
    color,
    crop,
    intensity,
    mean,
    scale,
)

__all__ = [
    "Color",
    "Crop",
    "ImageTransform",
    "Intensity",
    "Mean",
    "Scale",
    "color",
    "crop",
    "intensity",
    "mean",
    "scale",
]
