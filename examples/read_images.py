"""Images from a CNTK image map file, with cntk.io-style transforms (random crop, scale, colour jitter).

examples/data/images/map.txt lists 8 PNG images of 24x24, a line each: ``key<TAB>.../imgN.png<TAB>class`` (``...``
is the map file's folder; a 2-column ``path<TAB>class`` map works too, its keys are the line numbers). Run from
the repository root: ``python examples/read_images.py``.
"""
# requires: cv2

from __future__ import annotations

import numpy as np

from cntkio import ImageDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio import transforms as T

MAP = "examples/data/images/map.txt"


def image_source(transforms: list, seed: int = 7, **options: object) -> MinibatchSource:
    streams = StreamDefs(
        features=StreamDef(field="image", transforms=transforms),  # the pixels
        labels=StreamDef(field="label", shape=4),  # the class, one-hot over 4 classes
    )
    return MinibatchSource(ImageDeserializer(MAP, streams, seed=seed, **options), max_sweeps=1, randomization_seed=1)


# Training: a random crop of 75-100 % of the shorter side (drawn uniformly; random crops are mirrored at random),
# scaled to 16x16, with colour jitter.
train = [
    T.crop("randomside", side_ratio=(0.75, 1.0), jitter_type="uniratio"),
    T.scale(16, 16, 3),
    T.color(0.2, 0.2, 0.2),
]
source = image_source(train)
minibatch = source.next_minibatch(4)
images, labels = minibatch["features"], minibatch["labels"]
print("CNTK's layout: float32 CHW, BGR:", images.values.shape, images.values.dtype)  # (4, 3, 16, 16)
print("keys:", [key for _, key in minibatch.sequence_keys], "classes:", labels.indices.tolist())
source.close()

# The same seed gives the same crops whatever the threads, workers or partitions: augmentation is a function of
# (seed, transform seed, sweep, key), not of where an image lands in a minibatch.
again = image_source(train)
print("same augmentation on a re-run:", np.array_equal(again.next_minibatch(4)["features"].values, images.values))
again.close()

# Evaluation: a centre crop and a scale. For PyTorch: HWC or CHW, RGB, uint8 or normalised float32.
evaluation = [T.crop("center", side_ratio=1.0), T.scale(16, 16, 3), T.normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))]
source = image_source(evaluation, channel_order="rgb", layout="chw")
minibatch = source.next_minibatch(8)
values = minibatch["features"].values
print("normalised RGB:", values.shape, f"mean {values.mean():.2f}, range [{values.min():.2f}, {values.max():.2f}]")
source.close()

raw = image_source([T.scale(24, 24, 3)], layout="hwc", channel_order="rgb", dtype=np.uint8)
pixels = raw.next_minibatch(1)["features"].values[0]
print("uint8 HWC RGB:", pixels.shape, pixels.dtype, "top-left pixel", pixels[0, 0].tolist())
raw.close()
