"""Speech data: HTK features listed in an SCP file, joined with MLF frame labels by utterance key.

examples/data/speech/ holds 8 utterances of 8-dimensional features in one HTK archive, ``features.scp`` listing them
as ``spk0_utt00.mfc=.../features.ark[0,16]`` (``...`` is the SCP file's folder; the range is inclusive), the labels
of every frame in ``labels.mlf`` and the 5 states in ``states.list``. Run from the repository root:
``python examples/read_htk_mlf.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cntkio import HTKFeatureDeserializer, HTKMLFDeserializer, MinibatchSource, StreamDef, StreamDefs

SPEECH = "examples/data/speech"
STATES = Path(SPEECH, "states.list").read_text().split()


def speech_source(**options: object) -> MinibatchSource:
    features = HTKFeatureDeserializer(
        StreamDefs(features=StreamDef(shape=8, scp=f"{SPEECH}/features.scp", context=(1, 1)))  # 3 frames of 8
    )
    labels = HTKMLFDeserializer(
        f"{SPEECH}/states.list", StreamDefs(labels=StreamDef(shape=len(STATES), mlf=f"{SPEECH}/labels.mlf"))
    )
    return MinibatchSource([features, labels], **options)  # joined by utterance key: the features' order


# Sequence mode: one sequence per utterance, its frames as samples, each label one-hot over the states.
source = speech_source(randomize=False, max_sweeps=1)
minibatch = source.next_minibatch(64)
features, labels = minibatch["features"], minibatch["labels"]
print("utterances:", [key for _, key in minibatch.sequence_keys])
print("frames per utterance:", features.sequence_lengths.tolist(), "feature dim:", features.values.shape[1])
first = labels.as_sequences()[0].toarray().argmax(axis=1)  # the states of the first utterance, frame by frame
print("states of the first utterance:", " ".join(STATES[s] for s in first))
# the example's features are about the frame's state id: the centre frame of the window follows the labels
centre = features.as_sequences()[0][:, 8:16].mean(axis=1)
print("features follow the labels:", bool(np.all(np.abs(centre - first) < 0.5)))
print(source.join_report)
source.close()

# Frame mode: every frame is a sequence of one, randomized within a window of frames (CNTK's frame-level training).
# A window in samples needs the window in chunks set to 0 (both set is an error, as in cntk.io).
frames = speech_source(frame_mode=True, randomization_window_in_chunks=0, randomization_window_in_samples=100,
                       randomization_seed=1, max_sweeps=1)  # fmt: skip
counts = []
while minibatch := frames.next_minibatch(32):
    counts.append(minibatch["features"].num_sequences)
print("frame mode: minibatches of", counts, "frames")
frames.close()
