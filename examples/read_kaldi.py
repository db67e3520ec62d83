"""Kaldi features: a binary archive (``feats.ark``) and its ``feats.scp``, joined with MLF frame labels by utterance
key, in sequence mode and frame mode.

The example writes its data first, in a temporary folder, with a few lines of NumPy (no Kaldi or kaldiio needed):
a Kaldi archive is ``key `` + ``\\0B`` + ``FM `` + ``\\4`` rows + ``\\4`` cols (int32) + the float32 rows, matrix
after matrix; the scp file gives each key's ``archive:offset`` (the offset of its ``\\0B``). Run from the
repository root: ``python examples/read_kaldi.py``.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np

from cntkio import HTKMLFDeserializer, KaldiDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio.htk import write_mlf

DIM, STATES = 6, ["sil", "a", "b", "c"]


def write_kaldi(ark: Path, scp: Path, matrices: dict[str, np.ndarray]) -> None:
    """Float32 matrices as Kaldi writes them (``copy-feats ark:- ark,scp:feats.ark,feats.scp``)."""
    lines = []
    with open(ark, "wb") as out:
        for key, matrix in matrices.items():
            out.write(key.encode() + b" ")
            lines.append(f"{key} {ark}:{out.tell()}\n")
            rows, cols = matrix.shape
            out.write(b"\0BFM " + struct.pack("<bibi", 4, rows, 4, cols) + matrix.astype("<f4").tobytes())
    scp.write_text("".join(lines))


with tempfile.TemporaryDirectory() as folder:
    data = Path(folder)
    rng = np.random.default_rng(0)
    states = {f"spk{i}_utt{i:02d}": rng.integers(0, len(STATES), size=int(rng.integers(5, 15))) for i in range(6)}
    # each frame's features are about its state: state id + noise
    matrices = {k: (s[:, None] + rng.normal(0, 0.1, (len(s), DIM))).astype(np.float32) for k, s in states.items()}
    write_kaldi(data / "feats.ark", data / "feats.scp", matrices)
    write_mlf(data / "labels.mlf", {k: [(t, t + 1, STATES[x]) for t, x in enumerate(s)] for k, s in states.items()})
    (data / "states.list").write_text("\n".join(STATES) + "\n")

    def speech_source(**options: object) -> MinibatchSource:
        features = KaldiDeserializer(
            StreamDefs(features=StreamDef(shape=DIM, scp=str(data / "feats.scp"), context=(1, 1)))  # 3 frames
        )
        labels = HTKMLFDeserializer(
            str(data / "states.list"), StreamDefs(labels=StreamDef(shape=len(STATES), mlf=str(data / "labels.mlf")))
        )
        return MinibatchSource([features, labels], **options)  # joined by utterance key

    source = speech_source(randomize=False, max_sweeps=1)
    minibatch = source.next_minibatch(1000)
    features, labels = minibatch["features"], minibatch["labels"]
    print("utterances:", [key for _, key in minibatch.sequence_keys])
    print("frames per utterance:", features.sequence_lengths.tolist(), "feature dim:", features.values.shape[1])
    first = labels.as_sequences()[0].toarray().argmax(axis=1)
    centre = features.as_sequences()[0][:, DIM : 2 * DIM]  # the centre frame of the (1, 1) window
    print("same values as written:", bool(np.array_equal(centre, matrices["spk0_utt00"])))
    print("features follow the labels:", bool(np.all(np.abs(centre.mean(axis=1) - first) < 0.5)))
    source.close()

    frames = speech_source(frame_mode=True, max_sweeps=1)
    total = 0
    while minibatch := frames.next_minibatch(16):
        total += minibatch["features"].num_sequences
    print(f"frame mode: {total} frames of {sum(len(s) for s in states.values())}")
    frames.close()
