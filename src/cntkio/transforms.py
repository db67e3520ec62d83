"""Image transforms (``cntk.io.transforms``): crop, scale, mean, color, intensity, and normalize (cntkio's).

The public face of ``cntkio._src.formats.image_transforms`` (every name of its ``__all__``)."""

from cntkio._src.formats import image_transforms as _image_transforms
from cntkio._src.formats.image_transforms import *  # noqa: F403

__all__ = list(_image_transforms.__all__)
