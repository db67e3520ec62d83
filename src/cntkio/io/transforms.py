"""``cntk.io.transforms`` under its CNTK name: the image transforms of :mod:`cntkio.transforms`.

Example::

    import cntkio.io.transforms as xforms
    steps = [xforms.crop(crop_type="randomside", side_ratio=0.5), xforms.scale(width=64, height=64, channels=3)]
"""

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
    "Color", "Crop", "ImageTransform", "Intensity", "Mean", "Scale", "color", "crop", "intensity", "mean", "scale",
]  # fmt: skip
