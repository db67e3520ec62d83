"""``cntk.io.transforms`` under its CNTK name: the image transforms of :mod:`cntkio.transforms`.

Example::

    import cntkio.io.transforms as xforms
    steps = [xforms.crop(crop_type="randomside", side_ratio=0.5), xforms.scale(width=64, height=64, channels=3)]
"""

from cntkio import transforms as _transforms
from cntkio.transforms import *  # noqa: F403

__all__ = list(_transforms.__all__)
