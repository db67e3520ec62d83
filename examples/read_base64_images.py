"""Images stored in one text file as Base64 (CNTK's Base64ImageDeserializer), read with transforms.

examples/data/images/images.b64 holds the 8 images of examples/data/images/map.txt, a line each:
``key<TAB>class<TAB>base64 of the PNG file`` (without keys: ``class<TAB>base64``; the first line decides). The
file is indexed like a CTF file and read by offset, so it can be large and sharded. Run from the repository root:
``python examples/read_base64_images.py``.
"""
# requires: cv2

from __future__ import annotations

import numpy as np

from cntkio import Base64ImageDeserializer, ImageDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio import transforms as T


def streams() -> StreamDefs:
    return StreamDefs(
        features=StreamDef(field="image", transforms=[T.scale(16, 16, 3)]), labels=StreamDef(field="label", shape=4)
    )


source = MinibatchSource(Base64ImageDeserializer("examples/data/images/images.b64", streams()), randomize=False,
                         max_sweeps=1)  # fmt: skip
minibatch = source.next_minibatch(8)
print("images:", minibatch["features"].values.shape, "classes:", minibatch["labels"].indices.tolist())
print("keys:", [key for _, key in minibatch.sequence_keys])
source.close()

# The same pixels as the image files the map file lists.
files = MinibatchSource(ImageDeserializer("examples/data/images/map.txt", streams()), randomize=False, max_sweeps=1)
print("same pixels as the PNG files:", np.array_equal(files.next_minibatch(8)["features"].values,
                                                       minibatch["features"].values))  # fmt: skip
files.close()
