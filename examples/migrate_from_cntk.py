"""A CNTK 2.x training script's reader, moved to cntkio by changing one import.

The reading code below is written as CNTK 2.x users wrote it against ``cntk.io``: a ``MinibatchSource`` over a
``CTFDeserializer`` with ``StreamDefs``, ``next_minibatch`` with an ``input_map``, ``MinibatchData.data`` (CNTK's
``Value``: ``np.asarray`` and ``mask``), ``end_of_sweep`` and the reader's checkpoint state. Only the import differs
(``import cntk.io as C`` was the first line). CNTK's trainer is replaced by a small NumPy model: softmax regression
on each sequence's mean feature vector, trained with plain SGD.

The data is ``examples/data/sequences.ctf`` (written by ``examples/make_data.py``): 12 sequences of 2 to 7 steps,
a dense 3-value ``|features`` sample per step and a one-hot ``|label`` (4 classes) on each sequence's first step.

The script then shows what the checkpoint state is for: training stopped after a few minibatches, saved (reader
state as JSON, weights as ``.npz``) and resumed in a new reader ends with weights bit-identical to a run that was
never interrupted. Last, it loads readers from BrainScript configs as they are: ``examples/sequences.cntk`` (the
legacy ``readerType`` form) and ``examples/migration/train.cntk`` (the ``deserializers`` form). That part is cntkio's
own (CNTK read its configs in its own executable, not from Python); everything before it uses only ``cntk.io``'s API.

Run from the repository's root: ``python examples/migrate_from_cntk.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import cntkio.io as C  # was: import cntk.io as C

DATA = Path("examples/data/sequences.ctf")
CONFIG = Path("examples/sequences.cntk")
COMPOSITE_CONFIG = Path("examples/migration/train.cntk")
FEATURE_DIM = 3
CLASSES = 4
MINIBATCH_SAMPLES = 16
SWEEPS = 40
LEARNING_RATE = 0.2


class Input:
    """Stands where a CNTK input variable was: ``input_map`` keys may be any objects."""

    def __init__(self, name: str):
        self.name = name


features = Input("features")
label = Input("label")


def open_reader(path: Path, training: bool) -> C.MinibatchSource:
    """Randomized and repeated for training; one sweep in file order for evaluation."""
    streams = C.StreamDefs(
        features=C.StreamDef(field="features", shape=FEATURE_DIM, is_sparse=False),
        labels=C.StreamDef(field="label", shape=CLASSES, is_sparse=True),
    )
    return C.MinibatchSource(
        C.CTFDeserializer(str(path), streams),
        randomize=training,
        randomization_seed=1,
        max_sweeps=SWEEPS if training else 1,
    )


def mapping(reader: C.MinibatchSource) -> dict[Input, C.StreamInformation]:
    return {features: reader.streams.features, label: reader.streams.labels}


def arrays(minibatch: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's mean feature vector [sequences, 3] and its class [sequences]."""
    value = minibatch[features].data  # CNTK's Value: [sequences, steps, 3], zero-padded
    valid = (value.mask > 0)[..., None]  # 2 = first step, 1 = a later step, 0 = padding
    means = (value.asarray() * valid).sum(axis=1) / valid.sum(axis=1)
    classes = minibatch[label].data.asarray()[:, 0, :].argmax(axis=1)  # one label sample per sequence
    return means, classes


def new_model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"W": rng.normal(0.0, 0.1, size=(FEATURE_DIM, CLASSES)), "b": np.zeros(CLASSES)}


def probabilities(model: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    logits = x @ model["W"] + model["b"]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def train_minibatch(model: dict[str, np.ndarray], minibatch: dict) -> float:
    """One SGD step of softmax regression; returns the mean cross-entropy before the step."""
    x, y = arrays(minibatch)
    p = probabilities(model, x)
    loss = float(-np.log(p[np.arange(len(y)), y]).mean())
    p[np.arange(len(y)), y] -= 1.0
    model["W"] -= LEARNING_RATE * x.T @ p / len(y)
    model["b"] -= LEARNING_RATE * p.mean(axis=0)
    return loss


def train(
    reader: C.MinibatchSource, model: dict[str, np.ndarray], stop_after: int | None = None, report: bool = False
) -> int:
    """Trains until the reader's sweeps are read (or ``stop_after`` minibatches); returns the minibatches read."""
    input_map = mapping(reader)
    steps, sweeps, losses = 0, 0, []
    while stop_after is None or steps < stop_after:
        minibatch = reader.next_minibatch(MINIBATCH_SAMPLES, input_map=input_map)
        if not minibatch:  # {}: max_sweeps reached
            break
        losses.append(train_minibatch(model, minibatch))
        steps += 1
        if minibatch[features].end_of_sweep:  # the minibatch holds the last sample of a sweep
            sweeps += 1
            if report and sweeps % 10 == 0:
                print(f"  sweep {sweeps:2d}: mean loss {np.mean(losses):.3f}")
            losses = []
    return steps


def accuracy(model: dict[str, np.ndarray]) -> float:
    reader = open_reader(DATA, training=False)
    input_map = mapping(reader)
    right = total = 0
    while minibatch := reader.next_minibatch(MINIBATCH_SAMPLES, input_map=input_map):
        x, y = arrays(minibatch)
        right += int((probabilities(model, x).argmax(axis=1) == y).sum())
        total += len(y)
    return right / total


def resume_from_a_checkpoint(reference: dict[str, np.ndarray], total_steps: int) -> None:
    """Stops after 25 minibatches, saves, resumes in a new reader and model: the same weights in the end."""
    model = new_model()
    reader = open_reader(DATA, training=True)
    train(reader, model, stop_after=25)
    with tempfile.TemporaryDirectory() as directory:
        saved = Path(directory)
        (saved / "reader.json").write_text(json.dumps(reader.get_checkpoint_state()))  # a small JSON dict
        np.savez(saved / "model.npz", **model)
        del reader, model  # the process could end here

        model = dict(np.load(saved / "model.npz"))
        reader = open_reader(DATA, training=True)  # the same file and options (a copy elsewhere works too)
        reader.restore_from_checkpoint(json.loads((saved / "reader.json").read_text()))
        steps = 25 + train(reader, model)
    assert steps == total_steps
    assert all(np.array_equal(model[name], reference[name]) for name in reference), "resumed training differs"
    print(f"resumed after 25 of {total_steps} minibatches: the final weights are bit-identical")


# --- cntkio's own, not cntk.io: BrainScript reader sections loaded from Python -----------------------------------


def sequence_ids(minibatch: Any) -> list[int]:
    """The CTF sequence ids a minibatch holds, in order (``sequence_keys`` is cntkio's: (file, id) pairs)."""
    return [sequence_id for _, sequence_id in minibatch.sequence_keys]


def read_the_brainscript_configs() -> None:
    """The reader sections of CNTK configs, loaded as they are ($ConfigDir$ is the config's folder)."""
    from cntkio.brainscript import load_reader

    reader = load_reader(CONFIG, section="Train.reader")  # the legacy readerType = "CNTKTextFormatReader" form
    for epoch in range(2):  # the SGD section's epochSize = 0: an epoch is one sweep
        reader.start_epoch(epoch)
        samples = 0
        while minibatch := reader.next_minibatch(64):
            samples += minibatch["features"].num_samples
        print(f"{CONFIG}, epoch {epoch}: {samples} samples")

    # the deserializers form, with the options of open_reader(training=True): the same sequences in the same order
    reader = load_reader(COMPOSITE_CONFIG, section="Train.reader")
    from_config = []
    for epoch in range(3):
        reader.start_epoch(epoch)
        while minibatch := reader.next_minibatch(MINIBATCH_SAMPLES):
            from_config += sequence_ids(minibatch)
    in_python = []
    with open_reader(DATA, training=True) as python_reader:
        while len(in_python) < len(from_config):
            in_python += sequence_ids(python_reader.next_minibatch(MINIBATCH_SAMPLES))
    assert in_python[: len(from_config)] == from_config
    print(f"{COMPOSITE_CONFIG}, 3 epochs: sequences {from_config[:6]}..., as the Python-built reader reads them")

    evaluation = load_reader(COMPOSITE_CONFIG, section="Eval.reader")  # randomize = false: the file's order
    evaluation.start_epoch(0)
    in_file_order = []
    while minibatch := evaluation.next_minibatch(MINIBATCH_SAMPLES):
        in_file_order += sequence_ids(minibatch)
    assert in_file_order == list(range(12))


# --- the script -------------------------------------------------------------------------------------------------


def main() -> None:
    model = new_model()
    print(f"before training: accuracy {accuracy(model):.2f}")
    reader = open_reader(DATA, training=True)
    steps = train(reader, model, report=True)
    print(f"after {steps} minibatches ({SWEEPS} sweeps): accuracy {accuracy(model):.2f}")
    resume_from_a_checkpoint(model, steps)
    read_the_brainscript_configs()


if __name__ == "__main__":
    main()
