"""Ray Data beyond CTF: HTK features joined with MLF labels, and images decoded and augmented, as Ray datasets (a read
task per chunk), converted to CBF shards by Ray, with the errors a read counts as a dataset of their own.

Reads examples/data/speech/ (8 utterances, HTK features and MLF labels) and examples/data/images/ (8 PNG images in a
map file) on a local Ray instance of 2 CPUs. Run from the repository root: ``python examples/ray_speech_images.py``.
"""
# requires: ray, cv2

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import ray

import cntkio.ray
from cntkio import CBFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio import transforms as T

SPEECH = "examples/data/speech"

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
try:
    with tempfile.TemporaryDirectory() as folder:
        # Speech: a task per chunk of utterances of the features; each task looks the labels up by key.
        speech = cntkio.ray.HTKMLFDatasource(
            StreamDefs(features=StreamDef(shape=8, scp=f"{SPEECH}/features.scp", context=(1, 1))),
            StreamDefs(labels=StreamDef(shape=5, mlf=f"{SPEECH}/labels.mlf")),
            f"{SPEECH}/states.list",
            feature_options={"chunk_frames": 40},
        )
        print(speech.join_reports[0])
        rows = speech.dataset().take_all()  # dataset(): a block per chunk, whatever the cluster's size
        row = min(rows, key=lambda r: (r["chunk"], r["row"]))
        features = np.reshape(row["features"], (-1, 24))
        print(f"utterances: {len(rows)}; {row['key']}: features {features.shape}, states {row['labels.indices'][:5]}")
        speech.dataset().write_datasink(cntkio.ray.CBFDatasink(Path(folder, "speech"), speech))
        source = MinibatchSource(CBFDeserializer(str(Path(folder, "speech", "part-*.cbf"))), randomize=False,
                                 max_sweeps=1)  # fmt: skip
        minibatch = source.next_minibatch(10_000)
        print("speech CBF read back:", minibatch["features"].num_sequences, "utterances,",
              minibatch["features"].num_samples, "frames")  # fmt: skip
        source.close()

        # Images: decoded and augmented in the tasks; random transforms draw from (seed, sweep, key, view), so the
        # same pixels come out on any cluster (sweep= picks the sweep's augmentation).
        streams = StreamDefs(
            image=StreamDef(
                field="image", transforms=[T.crop("randomside", side_ratio=(0.75, 1.0)), T.scale(16, 16, 3)]
            ),
            label=StreamDef(field="label", shape=4),
        )
        images = cntkio.ray.ImageDatasource("examples/data/images/map.txt", streams, seed=7, images_per_chunk=4)
        first = {r["key"]: r["image"] for r in images.dataset().take_all()}
        again = cntkio.ray.ImageDatasource("examples/data/images/map.txt", streams, seed=7, images_per_chunk=4)
        same = all(np.array_equal(first[r["key"]], r["image"]) for r in again.dataset().take_all())
        shape = np.reshape(first["0"], (3, 16, 16)).shape
        print("images:", len(first), "of", shape, "- same pixels again:", same)

        # Errors: with max_errors, a bad record is left out of the rows and comes back as an error record.
        broken = Path(folder, "broken.ctf")
        broken.write_text("".join(f"{k} |features 1 2 3 |label {9 if k == 4 else k % 4}:1\n" for k in range(10)))
        ctf_streams = StreamDefs(
            features=StreamDef(field="features", shape=3), labels=StreamDef(field="label", shape=4, is_sparse=True)
        )
        corpus = cntkio.ray.CTFDatasource(broken, ctf_streams, max_errors=5, index_cache_dir=Path(folder, "index"))
        errors = corpus.errors().take_all()
        print("rows:", corpus.dataset().count(), "- errors:", [(e["line"], e["key"]) for e in errors])
        print(errors[0]["message"])
finally:
    ray.shutdown()
