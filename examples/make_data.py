"""Writes the small example data in examples/data/ (deterministic: the same bytes on every run and machine).

Run ``python examples/make_data.py [OUTPUT_DIRECTORY]`` (default: ``examples/data/`` beside this script). It needs
NumPy and cntkio (for the CBF file and the HTK writers); the PNG images are written without an image library.

- ``sequences.ctf``: 12 sequences (ids 0-11) of 2 to 7 steps. Each step has a dense 3-value ``|features`` sample.
  The first step of each sequence also has a one-hot sparse ``|label`` (4 classes) and, every fourth sequence, a
  ``|#`` comment.
- ``broken.ctf``: the same layout with a few deliberate mistakes, for ``cntkio inspect`` to find.
- ``sequences.cbf``: ``sequences.ctf`` converted with ``cntkio.write_cbf`` (chunks of about 256 bytes).
- ``labels.ctf``: a one-hot ``|label`` for the sequence ids of ``sequences.ctf`` but 5 and 9, and for an id 12
  that ``sequences.ctf`` lacks: joined by key with ``sequences.ctf``, two sequences are dropped.
- ``points.csv``: a header line, then 60 lines ``label,x1,x2,x3,x4`` (3 classes).
- ``points.svm``: 60 lines ``label index:value ...`` (svmlight, 1-based indices, 12 columns).
- ``records.jsonl``: 10 JSON lines ``{"id": ..., "tokens": [...], "label": ...}`` (token ids < 16).
- ``speech/``: 8 utterances of 8-dimensional HTK features in one archive (``features.ark``), an SCP listing them
  with ``.../features.ark[start,end]`` ranges (``...`` is the SCP file's folder), an MLF of their frame labels
  (``labels.mlf``) and the state list (``states.list``, 5 states).
- ``images/``: 8 PNG images of 24x24 (``img0.png`` ... ``img7.png``, 4 classes), an image map (``map.txt``:
  ``key<TAB>.../imgN.png<TAB>class``), the same images in a Base64 image file (``images.b64``:
  ``key<TAB>class<TAB>base64``) and ``image_ids.ctf``, one dense ``|id`` sample per image key.
- ``shards/``: ``sequences.ctf`` split into ``part-0.ctf``, ``part-1.ctf``, ``part-2.ctf`` (4 sequences each).
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
NUM_SEQUENCES = 12
NUM_CLASSES = 4

BROKEN = """\
0 |features 0.12 -1.5 2.25 |label 1:1 |# a valid first step
0 |features 0.5 .5 1.0
0 |features 3.0 0.25 -0.75
1 |features 1e-3 2.5 1,5 |label 0:1
1 |features 0.1 0.2 0.3
2 |features 0.7 -0.2 0.4 |label 9:1
2 |features 0.3 0.3x 0.1
3 |features 0.0 0.0 1.0
"""


def sequences_text(seed: int = 7) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for seq in range(NUM_SEQUENCES):
        length = int(rng.integers(2, 8))
        label = int(rng.integers(NUM_CLASSES))
        for step in range(length):
            values = " ".join(f"{v:.3f}" for v in rng.normal(label, 1.0, size=3))
            line = f"{seq} |features {values}"
            if step == 0:
                line += f" |label {label}:1"
                if seq % 4 == 0:
                    line += f" |# sequence {seq}: class {label}, {length} steps"
            lines.append(line)
    return "\n".join(lines) + "\n"


def labels_text() -> str:
    """Labels by sequence id for a composite join: ids 5 and 9 missing, an id 12 no feature sequence has."""
    ids = [i for i in range(NUM_SEQUENCES + 1) if i not in (5, 9)]
    return "".join(f"{i} |label {i % NUM_CLASSES}:1\n" for i in ids)


def points(seed: int = 3, count: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """``count`` labelled points of 4 features around three class centres."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % 3
    centres = np.array([[0.0, 0.0, 1.0, 1.0], [2.0, 1.0, 0.0, -1.0], [-1.0, 2.0, 2.0, 0.0]])
    return labels, centres[labels] + rng.normal(0.0, 0.5, size=(count, 4))


def csv_text() -> str:
    labels, features = points()
    rows = [f"{label}," + ",".join(f"{v:.4f}" for v in row) for label, row in zip(labels, features)]
    return "label,x1,x2,x3,x4\n" + "\n".join(rows) + "\n"


def svmlight_text(seed: int = 5, count: int = 60, dim: int = 12) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        columns = np.sort(rng.choice(dim, size=int(rng.integers(1, 5)), replace=False)) + 1  # 1-based
        entries = " ".join(f"{c}:{v:.3f}" for c, v in zip(columns, rng.uniform(0.1, 2.0, len(columns))))
        lines.append(f"{i % 2} {entries}")
    return "\n".join(lines) + "\n"


def records_text(seed: int = 11, count: int = 10) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        tokens = rng.integers(1, 16, size=int(rng.integers(2, 7))).tolist()
        lines.append(json.dumps({"id": f"r{i:02d}", "tokens": tokens, "label": i % 2}))
    return "\n".join(lines) + "\n"


STATES = ["sil", "a_1", "a_2", "b_1", "b_2"]
SPEECH_DIM = 8


def speech(seed: int = 13, count: int = 8) -> tuple[dict[str, np.ndarray], dict[str, list[tuple[int, int, str]]]]:
    """Per utterance: HTK frames ``(n, 8)`` whose values are about the frame's state id, and its labels
    ``(start, end, state)``: silence, two or three runs of states, silence."""
    rng = np.random.default_rng(seed)
    features, labels = {}, {}
    for u in range(count):
        key = f"spk{u % 2}_utt{u:02d}"
        runs, t = [], 0
        names = ["sil", *[STATES[int(s)] for s in rng.integers(1, len(STATES), size=int(rng.integers(2, 4)))], "sil"]
        for name in names:
            n = int(rng.integers(2, 6))
            runs.append((t, t + n, name))
            t += n
        state_ids = np.concatenate([np.full(end - start, STATES.index(name)) for start, end, name in runs])
        noise = rng.normal(0.0, 0.1, size=(t, SPEECH_DIM))
        features[key] = (state_ids[:, None] + noise).astype(np.float32)
        labels[key] = runs
    return features, labels


IMAGE_SIZE = 24
NUM_IMAGES = 8


def image_pixels(i: int) -> np.ndarray:
    """A 24x24 RGB image: a gradient background and a square whose colour is the class (i % 4)."""
    y, x = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
    image = np.zeros((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    image[..., 0] = (x * 10 + i * 7) % 256
    image[..., 1] = (y * 10) % 256
    image[..., 2] = 64
    colour = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)][i % NUM_CLASSES]
    top = 4 + i % 5
    image[top : top + 10, top : top + 10] = colour
    return image


def png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` with its pixels in one stored (uncompressed) deflate block: the same bytes
    whatever zlib the machine has."""
    height, width, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[row].tobytes() for row in range(height))  # filter type 0 on every row
    assert len(raw) < 65536
    deflate = b"\x78\x01\x01" + struct.pack("<HH", len(raw), len(raw) ^ 0xFFFF) + raw
    deflate += struct.pack(">I", zlib.adler32(raw))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", deflate) + chunk(b"IEND", b"")


def write_images(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    map_lines, base64_lines, id_lines = [], [], []
    for i in range(NUM_IMAGES):
        encoded = png(image_pixels(i))
        (folder / f"img{i}.png").write_bytes(encoded)
        map_lines.append(f"{i}\t.../img{i}.png\t{i % NUM_CLASSES}\n")
        base64_lines.append(f"{i}\t{i % NUM_CLASSES}\t{base64.b64encode(encoded).decode('ascii')}\n")
        id_lines.append(f"{i} |id {i}\n")
    (folder / "map.txt").write_text("".join(map_lines))
    (folder / "images.b64").write_text("".join(base64_lines))
    (folder / "image_ids.ctf").write_text("".join(id_lines))


def write_speech(folder: Path) -> None:
    from cntkio.htk import write_archive, write_mlf, write_scp, write_state_list

    folder.mkdir(exist_ok=True)
    features, labels = speech()
    entries = write_archive(folder / "features.ark", features, kind="USER")
    write_scp(folder / "features.scp", [replace(e, path=".../features.ark") for e in entries])
    write_mlf(folder / "labels.mlf", labels)
    write_state_list(folder / "states.list", STATES)


def write_shards(folder: Path, text: str) -> None:
    folder.mkdir(exist_ok=True)
    lines = text.splitlines(keepends=True)
    for part in range(3):
        ids = range(4 * part, 4 * part + 4)
        (folder / f"part-{part}.ctf").write_text("".join(line for line in lines if int(line.split()[0]) in ids))


def write_cbf_file(ctf: Path, cbf: Path) -> None:
    from cntkio import CTFDeserializer, StreamDef, StreamDefs, write_cbf

    streams = StreamDefs(
        features=StreamDef(field="features", shape=3), label=StreamDef(field="label", shape=4, is_sparse=True)
    )
    write_cbf(CTFDeserializer(ctf, streams), cbf, chunk_size_in_bytes=256, progress=False)


def main(output: Path = DATA) -> None:
    output.mkdir(parents=True, exist_ok=True)
    sequences = sequences_text()
    (output / "sequences.ctf").write_text(sequences)
    (output / "broken.ctf").write_text(BROKEN)
    (output / "labels.ctf").write_text(labels_text())
    (output / "points.csv").write_text(csv_text())
    (output / "points.svm").write_text(svmlight_text())
    (output / "records.jsonl").write_text(records_text())
    write_cbf_file(output / "sequences.ctf", output / "sequences.cbf")
    write_speech(output / "speech")
    write_images(output / "images")
    write_shards(output / "shards", sequences)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
