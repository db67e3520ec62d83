#!/usr/bin/env python3
"""Image reader bar (issue 10, "Speed"): cntkio's ImageDeserializer with random-side crop to 224 + scale + colour
jitter + label, minibatches of 64, against the common fast CPU pipeline doing the same work: a map-style PyTorch
Dataset that decodes with Pillow (or OpenCV) and augments with albumentations, in a DataLoader with 2 workers.

Every measurement runs in a fresh subprocess (imports untimed), round-robin over --runs rounds; the summary shows
medians. CPU seconds are user + system time of the child and all its threads, plus (anchors) its DataLoader worker
processes once they have exited. RSS is read from /proc/self/status (VmHWM, restarted after the imports).

Data: --images JPEGs of 256x256 (quality 90, cv2.imwrite; a coarse colour field, shapes and noise, so that files
differ in content and size like photos), 10 classes, written once under --data/images-N/ with a map file
`path<TAB>label` (absolute paths) and, for the stages, a map file of the first --stage-images lines.

  1. throughput  one sweep, from building the reader to the last minibatch; images/s and images per CPU-s:
                   cntkio      MinibatchSource(ImageDeserializer(map, StreamDefs(features=StreamDef(field='image',
                               transforms=[crop('randomside', side_ratio=224/256), scale(224, 224, 3),
                               color(0.4, 0.4, 0.4)]), labels=StreamDef(field='label', shape=10)),
                               channel_order='rgb', images_per_chunk=C), max_sweeps=1, randomization_seed=1,
                               randomization_window_in_chunks=--window / C), next_minibatch(64) until {}:
                               C = 1 (the default), C = 8, and C = 1 with cv2.setNumThreads(1) in the child
                   cntkio torch  cntkio.torch.MinibatchDataset(the C = 1 source, 64) in
                               DataLoader(batch_size=None, num_workers=0): float32 CHW tensors + CSR labels
                   anchor      a map-style Dataset: Image.open(path).convert('RGB') (Pillow) or cv2.imread +
                               cvtColor(BGR2RGB) (OpenCV), then albumentations Compose([RandomCrop(224, 224),
                               HorizontalFlip(p=0.5), ColorJitter(0.4, 0.4, 0.4, hue=0, p=1)]) (a random-side
                               crop of 224 from 256 then a scale to 224 is that crop; CNTK's random crops flip half
                               the images), returning a float32 CHW tensor and the label; DataLoader(batch_size=64,
                               shuffle=True, num_workers=2), default collate
                 Ratio: cntkio images/s / anchor images/s, for every cntkio row against both anchors
                 (bar >= 1.5x).
  2. stages      where cntkio's time goes, in one thread (cv2.setNumThreads(1)) over the first --stage-images
                 images, each step a loop of its own: read (open + read of the file), decode (cv2.imdecode, BGR),
                 transform (cntkio.formats.image_pipeline.ImagePipeline.run, same transforms and output, into a
                 reused minibatch-sized buffer, draws as the deserializer makes them); get_chunk of every chunk
                 of the C = 1 deserializer (chunks kept, as a window holding them all keeps them): minus the three
                 = chunk assembly (fresh chunk buffers, draws, keys, labels); total = the C = 1 source with
                 prefetch=False (parsing in the calling thread): minus get_chunk = randomizer + minibatch
                 gather/pack. Per image: ms, the thread's CPU ms (thread_time), minor page faults, share of the
                 total; beside it the C = 1 run of 1., its CPU split into the caller's thread (next_minibatch)
                 and the others (parse threads, OpenCV's own).
  3. memory      peak RSS growth of each cntkio run (VmHWM after reading minus VmRSS before building the reader,
                 cv2 imported and the heap trimmed before) against the window: --window images x output bytes per
                 image (3 x 224 x 224 float32) + one minibatch of them (bar: growth <= that). The loops drop each
                 minibatch before asking for the next, as a training step done with it does, so the growth is the
                 reader's: a caller that keeps the previous minibatch while the next is read holds one more.

Correctness: in every timed run, N images in minibatches of at most 64, every label in 0..9. In separate untimed
children of each configuration: every image delivered exactly once (the anchors return the index, cntkio the
sequence key = line of the map), its label the map's, pixels finite in [0, 255] and of shape 3 x 224 x 224; the
per-channel means are shown (no bar: the augmentations differ in detail). A child that fails is a failed check.
Exits 1 when a check is not ok (a missed bar is shown, not an error).

  python bench/images.py [--runs 3] [--images 3000] [--window 1000] [--json out.json]
  python bench/images.py --smoke      # 200 images, one round: a sanity check
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations would look for a new version online

from cntkio import ImageDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio import transforms as T
from composite import failures, proc_status, release_free_memory
from core import Report, Results, cpu_seconds, reset_peak_rss
from ctf_parse import _table
from harness import Job, Rounds, parser, run_child

SIDE = 256  # generated images are SIDE x SIDE
CROP = 224
CHANNELS = 3
CLASSES = 10
MINIBATCH = 64
QUALITY = 90
SEED = 1
WORKERS = 2  # the anchors' DataLoader workers
BAR = 1.5  # cntkio images/s / anchor images/s
OUTPUT_BYTES = CHANNELS * CROP * CROP * 4  # one float32 CHW output image
MIB = 2**20

CNTKIO_ROWS = {  # label -> (title, spec)
    "cntkio": ("cntkio MinibatchSource, images_per_chunk=1", {"images_per_chunk": 1}),
    "cntkio c8": ("cntkio MinibatchSource, images_per_chunk=8", {"images_per_chunk": 8}),
    "cntkio cv1": ("cntkio MinibatchSource, images_per_chunk=1, cv2.setNumThreads(1)",
                   {"images_per_chunk": 1, "cv2_threads": 1}),
    "cntkio torch": ("cntkio MinibatchDataset + DataLoader(num_workers=0)", {"images_per_chunk": 1, "torch": True}),
}  # fmt: skip
ANCHOR_ROWS = {
    "anchor pil": ("anchor: Pillow + albumentations, DataLoader(2 workers)", {"decoder": "pil"}),
    "anchor cv2": ("anchor: OpenCV + albumentations, DataLoader(2 workers)", {"decoder": "cv2"}),
}


# ------------------------------------------------------------------------------------------- children
def all_cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have exited (the DataLoader workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return cpu_seconds() + children.ru_utime + children.ru_stime


def read_map(path: str) -> tuple[list[str], np.ndarray]:
    paths, labels = [], []
    with open(path) as f:
        for line in f:
            file, label = line.rstrip("\n").split("\t")
            paths.append(file)
            labels.append(int(label))
    return paths, np.array(labels, dtype=np.int64)


def image_transforms() -> list[Any]:
    return [T.crop("randomside", side_ratio=CROP / SIDE), T.scale(CROP, CROP, CHANNELS), T.color(0.4, 0.4, 0.4)]


def image_deserializer(map_file: str, images_per_chunk: int) -> ImageDeserializer:
    streams = StreamDefs(
        features=StreamDef(field="image", transforms=image_transforms()),
        labels=StreamDef(field="label", shape=CLASSES),
    )
    return ImageDeserializer(map_file, streams, channel_order="rgb", images_per_chunk=images_per_chunk)


def image_source(spec: dict[str, Any], map_file: str | None = None, prefetch: bool = True) -> MinibatchSource:
    return MinibatchSource(
        image_deserializer(map_file or spec["map"], spec["images_per_chunk"]),
        max_sweeps=1,
        randomization_window_in_chunks=max(1, spec["window"] // spec["images_per_chunk"]),
        randomization_seed=SEED,
        prefetch=prefetch,
    )


class Tally:
    """What a reader delivered: images, minibatches, label range; with ``expected`` (the map's labels) also which
    images (each once), whether each label is the map's, the pixel range and the per-channel sums."""

    def __init__(self, expected: np.ndarray | None):
        self.images = self.minibatches = 0
        self.label_min, self.label_max = CLASSES, -1
        self.problems: list[str] = []
        self.expected = expected
        if expected is not None:
            self.seen = np.zeros(len(expected), dtype=np.int64)
            self.wrong_labels = 0
            self.pixel_min, self.pixel_max = np.inf, -np.inf
            self.channel_sums = np.zeros(CHANNELS)

    def add(self, count: int, labels: np.ndarray, images: np.ndarray | None = None, ids: Any = None) -> None:
        self.images += count
        self.minibatches += 1
        if len(labels) != count or count > MINIBATCH:
            self.problem(f"minibatch {self.minibatches}: {count} images, {len(labels)} labels")
        if len(labels):
            self.label_min = min(self.label_min, int(labels.min()))
            self.label_max = max(self.label_max, int(labels.max()))
        if self.expected is None or images is None:
            return
        ids = np.asarray(ids, dtype=np.int64)
        if images.shape != (count, CHANNELS, CROP, CROP) or images.dtype != np.float32:
            self.problem(f"minibatch {self.minibatches}: images {images.shape} {images.dtype}")
            return
        if ids.min() < 0 or ids.max() >= len(self.expected):
            self.problem(f"minibatch {self.minibatches}: image ids out of range: {ids.min()}..{ids.max()}")
            return
        np.add.at(self.seen, ids, 1)
        self.wrong_labels += int(np.count_nonzero(self.expected[ids] != labels))
        if not np.isfinite(images).all():
            self.problem(f"minibatch {self.minibatches}: pixels that are not finite")
        self.pixel_min = min(self.pixel_min, float(images.min()))
        self.pixel_max = max(self.pixel_max, float(images.max()))
        self.channel_sums += images.sum(axis=(0, 2, 3), dtype=np.float64)

    def problem(self, text: str) -> None:
        if len(self.problems) < 3:
            self.problems.append(text)

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "images": self.images,
            "minibatches": self.minibatches,
            "label_min": self.label_min,
            "label_max": self.label_max,
            "problems": self.problems,
        }
        if self.expected is not None:
            out.update({
                "distinct": int(np.count_nonzero(self.seen)),
                "repeated": int(np.count_nonzero(self.seen > 1)),
                "wrong_labels": self.wrong_labels,
                "pixel_min": self.pixel_min,
                "pixel_max": self.pixel_max,
                "channel_means": (self.channel_sums / max(1, self.images) / (CROP * CROP)).tolist(),
            })  # fmt: skip
        return out


def child_cntkio(spec: dict[str, Any]) -> dict[str, Any]:
    """A cntkio configuration: from building the deserializer to the last minibatch (or batch of the
    MinibatchDataset)."""
    import cv2  # imported before the baseline: its libraries are not the reader's memory

    if spec.get("cv2_threads") is not None:
        cv2.setNumThreads(spec["cv2_threads"])
    use_torch = bool(spec.get("torch"))
    if use_torch:
        from torch.utils.data import DataLoader

        from cntkio.torch import MinibatchDataset
    tally = Tally(read_map(spec["map"])[1] if spec["check"] else None)
    release_free_memory()
    base = proc_status("VmRSS")
    reset_peak_rss()
    cpu0, main0, t0 = cpu_seconds(), time.thread_time(), time.perf_counter()
    if use_torch:
        dataset = MinibatchDataset(functools.partial(image_source, spec), MINIBATCH)
        for batch in DataLoader(dataset, batch_size=None, num_workers=0):
            x, y = batch["features"], batch["labels"]
            labels = y.numpy()  # class ids (int64 [B]): the default layout of an image label stream
            if spec["check"]:
                tally.add(x.shape[0], labels, x.numpy(), [key for _, key in batch.keys])
            else:
                tally.add(x.shape[0], labels)
            del batch, x, y  # done with it before the next (see "3. memory")
    else:
        source = image_source(spec)
        while minibatch := source.next_minibatch(MINIBATCH):
            x, y = minibatch["features"], minibatch["labels"]
            if spec["check"]:
                keys = [key for _, key in minibatch.sequence_keys]
                tally.add(x.num_samples, y.indices, x.values, keys)
            else:
                tally.add(x.num_samples, y.indices)
            del minibatch, x, y  # done with it before the next (see "3. memory")
        source.close()
    seconds, cpu, main = time.perf_counter() - t0, cpu_seconds() - cpu0, time.thread_time() - main0
    peak = proc_status("VmHWM") - base
    return {"seconds": seconds, "cpu_s": cpu, "main_cpu_s": main, "peak_growth": peak, **tally.result()}


class AnchorDataset:
    """The anchor: a map-style Dataset (what a DataLoader needs of one: __len__ and __getitem__) that decodes an
    image with Pillow or OpenCV, augments it with albumentations and returns a float32 CHW tensor and its label
    (and, for the correctness check, its index)."""

    def __init__(self, map_file: str, decoder: str, with_index: bool):
        import albumentations as A

        self.paths, self.labels = read_map(map_file)
        self.decoder = decoder
        self.with_index = with_index
        self.augment = A.Compose([
            A.RandomCrop(CROP, CROP),
            A.HorizontalFlip(p=0.5),
            A.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0, p=1),
        ])  # fmt: skip

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        import cv2
        import torch
        from PIL import Image

        if self.decoder == "pil":
            image = np.asarray(Image.open(self.paths[index]).convert("RGB"))
        else:
            image = cv2.cvtColor(cv2.imread(self.paths[index], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        image = self.augment(image=image)["image"]
        tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1), dtype=np.float32))
        label = int(self.labels[index])
        return (tensor, label, index) if self.with_index else (tensor, label)


def child_anchor(spec: dict[str, Any]) -> dict[str, Any]:
    """An anchor: from building the Dataset to the last batch; CPU includes the workers (joined at the end)."""
    import albumentations  # noqa: F401  (imports untimed; the workers are forked with them)
    import cv2  # noqa: F401
    import PIL.Image  # noqa: F401
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(SEED)
    tally = Tally(read_map(spec["map"])[1] if spec["check"] else None)
    release_free_memory()
    base = proc_status("VmRSS")
    reset_peak_rss()
    cpu0, t0 = all_cpu_seconds(), time.perf_counter()
    dataset = AnchorDataset(spec["map"], spec["decoder"], spec["check"])
    loader = DataLoader(dataset, batch_size=MINIBATCH, shuffle=True, num_workers=WORKERS)
    for batch in loader:
        x, labels = batch[0], batch[1].numpy()
        if spec["check"]:
            tally.add(x.shape[0], labels, x.numpy(), batch[2].numpy())
        else:
            tally.add(x.shape[0], labels)
    seconds = time.perf_counter() - t0
    del loader  # the workers were shut down and joined when the iteration ended
    cpu = all_cpu_seconds() - cpu0
    return {"seconds": seconds, "cpu_s": cpu, "peak_growth": proc_status("VmHWM") - base, **tally.result()}


def child_stages(spec: dict[str, Any]) -> dict[str, Any]:
    """cntkio's stages, one thread, over the stage map's images: read, decode and transform as loops of their own,
    then the deserializer's get_chunk for every chunk (kept, as a window holding them all keeps them), then the
    whole source."""
    import cv2

    from cntkio._src.formats.image_pipeline import ImagePipeline, RandomDraws, key_hash

    cv2.setNumThreads(1)
    paths, _ = read_map(spec["stage_map"])
    pipeline = ImagePipeline(image_transforms(), channel_order="rgb", dtype=np.float32)
    out = np.empty((MINIBATCH, CHANNELS, CROP, CROP), dtype=np.float32)
    with open(paths[-1], "rb") as f:  # warm-up: first calls of the decoder and of each transform
        warm = cv2.imdecode(np.frombuffer(f.read(), dtype=np.uint8), cv2.IMREAD_COLOR)
    pipeline.run(warm, RandomDraws((0, 0, key_hash(len(paths)), 0)), 0, out=out[0])
    times: dict[str, dict[str, float]] = {}

    def timed(name: str, work: Any, *args: Any) -> Any:
        usage0, cpu0, t0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
        result = work(*args)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        times[name] = {
            "seconds": seconds,
            "cpu_s": cpu,
            "faults": usage.ru_minflt - usage0.ru_minflt,
        }
        return result

    def read_all() -> list[bytes]:
        blobs = []
        for path in paths:
            with open(path, "rb") as f:
                blobs.append(f.read())
        return blobs

    def decode_all(blobs: list[bytes]) -> list[np.ndarray]:
        return [cv2.imdecode(np.frombuffer(blob, dtype=np.uint8), cv2.IMREAD_COLOR) for blob in blobs]

    def transform_all(decoded: list[np.ndarray]) -> None:
        for i, image in enumerate(decoded):  # the deserializer's draws: (seed, sweep, key_hash(key), view)
            pipeline.run(image, RandomDraws((0, 0, key_hash(i), 0)), 0, out=out[i % MINIBATCH])

    def get_chunks(deserializer: ImageDeserializer) -> list[Any]:
        return [deserializer.get_chunk_of_sweep(c, 0) for c in range(deserializer.num_chunks())]

    timed("transform", transform_all, timed("decode", decode_all, timed("read", read_all)))
    release_free_memory()
    timed("get_chunk", get_chunks, image_deserializer(spec["stage_map"], 1))  # the chunks are kept until it returns
    release_free_memory()

    def whole_source() -> int:
        source = image_source({**spec, "images_per_chunk": 1}, spec["stage_map"], prefetch=False)
        images = 0
        while minibatch := source.next_minibatch(MINIBATCH):
            images += minibatch["features"].num_samples
        source.close()
        return images

    images = timed("total", whole_source)
    problems = [] if images == len(paths) else [f"the source delivered {images} of {len(paths)} images"]
    return {"images": len(paths), "stages": times, "problems": problems}


CHILDREN = {"cntkio": child_cntkio, "anchor": child_anchor, "stages": child_stages}


# ----------------------------------------------------------------------------------------------- data
def make_image(rng: np.random.Generator, cv2: Any) -> np.ndarray:
    """A 256 x 256 BGR image: a coarse colour field, a few shapes and some noise (texture), each random."""
    coarse = rng.integers(0, 256, (int(rng.integers(2, 9)), int(rng.integers(2, 9)), 3), dtype=np.uint8)
    image = cv2.resize(coarse, (SIDE, SIDE), interpolation=cv2.INTER_CUBIC)
    for _ in range(int(rng.integers(3, 15))):
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = (int(v) for v in rng.integers(0, SIDE, 2))
        thickness = -1 if rng.random() < 0.5 else int(rng.integers(1, 8))
        kind = int(rng.integers(3))
        if kind == 0:
            cv2.circle(image, (x, y), int(rng.integers(5, SIDE // 3)), colour, thickness, cv2.LINE_AA)
        elif kind == 1:
            x2, y2 = (int(v) for v in rng.integers(0, SIDE, 2))
            cv2.rectangle(image, (x, y), (x2, y2), colour, thickness)
        else:
            x2, y2 = (int(v) for v in rng.integers(0, SIDE, 2))
            cv2.line(image, (x, y), (x2, y2), colour, max(1, thickness), cv2.LINE_AA)
    noise = rng.standard_normal(image.shape, dtype=np.float32) * float(rng.uniform(2.0, 14.0))
    return np.clip(image + noise, 0, 255).astype(np.uint8)


def write_images(data: Path, count: int, stage_images: int) -> dict[str, Any]:
    """The JPEGs and map files (once per count; meta.json, written last, marks them complete)."""
    directory = data / f"images-{count}"
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        import cv2

        directory.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(SEED)
        labels = rng.integers(0, CLASSES, count)
        lines = []
        total = 0
        for i in range(count):
            path = (directory / f"img_{i:06d}.jpg").resolve()
            if not cv2.imwrite(str(path), make_image(rng, cv2), [cv2.IMWRITE_JPEG_QUALITY, QUALITY]):
                sys.exit(f"cannot write {path}")
            total += path.stat().st_size
            lines.append(f"{path}\t{labels[i]}\n")
        (directory / "map.txt").write_text("".join(lines))
        meta = {"images": count, "jpeg_bytes": total, "label_counts": np.bincount(labels, minlength=CLASSES).tolist()}
        meta_path.write_text(json.dumps(meta))
    meta = dict(json.loads(meta_path.read_text()))
    stage = min(stage_images, count)
    stage_map = directory / f"map-first{stage}.txt"
    if not stage_map.exists():
        with open(directory / "map.txt") as f:
            stage_map.write_text("".join(line for _, line in zip(range(stage), f)))
    meta.update({"map": str((directory / "map.txt").resolve()), "stage_map": str(stage_map.resolve()),
                 "stage_images": stage, "directory": str(directory)})  # fmt: skip
    return meta


# --------------------------------------------------------------------------------------------- parent
def jobs_of(args: argparse.Namespace, meta: dict[str, Any]) -> tuple[list[Job], list[Job]]:
    """(timed jobs of one round, in the order they run; correctness jobs, run once)."""
    common = {"map": meta["map"], "window": args.window}
    timed, checks = [], []
    for label, (_, spec) in CNTKIO_ROWS.items():
        timed.append(Job(label, "cntkio", {**common, **spec, "check": False}))
        checks.append(Job(f"{label} check", "cntkio", {**common, **spec, "check": True}))
    for label, (_, spec) in ANCHOR_ROWS.items():
        timed.append(Job(label, "anchor", {**common, **spec, "check": False}))
        checks.append(Job(f"{label} check", "anchor", {**common, **spec, "check": True}))
    timed.append(Job("stages", "stages", {**common, "stage_map": meta["stage_map"]}))
    return timed, checks


def middle(values: list[float]) -> float:
    return float(statistics.median(values))


def run_problems(runs: list[dict[str, Any]], images: int) -> list[str]:
    problems = failures(runs)
    for number, r in enumerate(runs, 1):
        if "failed" in r:
            continue
        problems += [f"run {number}: {p}" for p in r["problems"]]
        if r["images"] != images:
            problems.append(f"run {number}: {r['images']} images of {images}")
        if r["label_min"] < 0 or r["label_max"] >= CLASSES:
            problems.append(f"run {number}: labels {r['label_min']}..{r['label_max']}")
    return problems


def check_problems(check: dict[str, Any], images: int) -> list[str]:
    if "failed" in check:
        return [check["failed"]]
    problems = run_problems([check], images)
    if check["distinct"] != images or check["repeated"]:
        problems.append(f"{check['distinct']} distinct images of {images}, {check['repeated']} repeated")
    if check["wrong_labels"]:
        problems.append(f"{check['wrong_labels']} labels differ from the map's")
    if not 0 <= check["pixel_min"] <= check["pixel_max"] <= 255:
        problems.append(f"pixels in {check['pixel_min']:.1f}..{check['pixel_max']:.1f}")
    return problems


THROUGHPUT_COLUMNS = ("reader", "s", "s range", "CPU s", "images/s", "images/CPU-s", "cores busy",
                      "peak RSS growth MiB", "check")  # fmt: skip
RATIO_COLUMNS = ("cntkio / anchor, images/s", "/ Pillow anchor", f"bar >= {BAR}x", "per CPU-s", "/ OpenCV anchor",
                 f"bar >= {BAR}x", "per CPU-s")  # fmt: skip


def throughput_section(report: Report, args: argparse.Namespace, meta: dict[str, Any], results: Results) -> None:
    images = meta["images"]
    rows, numbers = [], {}
    for label, (title, _) in {**CNTKIO_ROWS, **ANCHOR_ROWS}.items():
        runs = results[label]
        check = report.verdict(run_problems(runs, images) + check_problems(results[f"{label} check"][0], images))
        good = [r for r in runs if "failed" not in r]
        if not good:
            rows.append((title, "-", "-", "-", "-", "-", "-", "-", check))
            continue
        seconds = middle([r["seconds"] for r in good])
        cpu = middle([r["cpu_s"] for r in good])
        peak = middle([r["peak_growth"] for r in good])
        spread = f"{min(r['seconds'] for r in good):.2f}-{max(r['seconds'] for r in good):.2f}"
        numbers[label] = {"seconds": seconds, "cpu_s": cpu, "images_per_s": images / seconds,
                          "images_per_cpu_s": images / cpu, "peak_growth_bytes": peak, "check": check}  # fmt: skip
        peak_text = f"{peak / MIB:.0f}" if label in CNTKIO_ROWS else f"{peak / MIB:.0f} (+workers)"
        rows.append((title, f"{seconds:.2f}", spread, f"{cpu:.2f}", f"{images / seconds:,.0f}",
                     f"{images / cpu:,.0f}", f"{cpu / seconds:.2f}", peak_text, check))  # fmt: skip
    ratio_rows = []
    for label, (title, _) in CNTKIO_ROWS.items():
        if label not in numbers:
            continue
        cells: list[str] = [title.removeprefix("cntkio ")]
        for anchor in ANCHOR_ROWS:
            if anchor not in numbers:
                cells += ["-", "-", "-"]
                continue
            ratio = numbers[label]["images_per_s"] / numbers[anchor]["images_per_s"]
            cpu_ratio = numbers[label]["images_per_cpu_s"] / numbers[anchor]["images_per_cpu_s"]
            numbers[label][f"ratio {anchor}"] = ratio
            numbers[label][f"cpu ratio {anchor}"] = cpu_ratio
            cells += [f"{ratio:.2f}x", "PASS" if ratio >= BAR else "FAIL", f"{cpu_ratio:.2f}x"]
        ratio_rows.append(tuple(cells))
    report.numbers["throughput"] = numbers
    report.section(
        f"## 1. Throughput: {images:,} JPEGs {SIDE}x{SIDE} q{QUALITY} ({meta['jpeg_bytes'] / images / 1024:.1f} KiB "
        f"each on average), random-side crop 224 + flip + scale + colour jitter + label, minibatches of {MINIBATCH}, "
        f"1 sweep; cntkio window {args.window:,} images",
        _table(THROUGHPUT_COLUMNS, rows),
        _table(RATIO_COLUMNS, ratio_rows),
    )


def stages_section(report: Report, meta: dict[str, Any], results: Results) -> None:
    runs = results["stages"]
    problems = failures(runs) + [p for r in runs if "failed" not in r for p in r["problems"]]
    check = report.verdict(problems)
    good = [r for r in runs if "failed" not in r]
    if not good:
        report.section("## 2. cntkio stages", f"failed: {check}")
        return
    count = meta["stage_images"]
    keys = ("seconds", "cpu_s", "faults")
    measured = {stage: {key: middle([r["stages"][stage][key] for r in good]) / count for key in keys}
                for stage in ("read", "decode", "transform", "get_chunk", "total")}  # fmt: skip
    pieces = ("read", "decode", "transform")
    stages = {stage: measured[stage] for stage in pieces}
    stages["chunk"] = {key: measured["get_chunk"][key] - sum(measured[s][key] for s in pieces) for key in keys}
    stages["source"] = {key: measured["total"][key] - measured["get_chunk"][key] for key in keys}
    stages["total"] = measured["total"]
    titles = {
        "read": "read (open + read)",
        "decode": "decode (cv2.imdecode)",
        "transform": "transform (ImagePipeline.run: crop, flip, scale, colour, CHW float32 RGB, into a reused buffer)",
        "chunk": "chunk assembly (get_chunk - the above: fresh chunk buffers, draws, keys, labels)",
        "source": "source: randomizer + minibatch gather/pack (total - get_chunk)",
        "total": "total: MinibatchSource(prefetch=False), one thread",
    }
    total = stages["total"]["seconds"]
    rows = []
    for stage, title in titles.items():
        n = stages[stage]
        rows.append((title, f"{1000 * n['seconds']:.3f}", f"{1000 * n['cpu_s']:.3f}",
                     f"{n['faults']:.0f}", f"{100 * n['seconds'] / total:.0f}%"))  # fmt: skip
    parallel = [r for r in results["cntkio"] if "failed" not in r]
    if parallel:  # the images_per_chunk=1 row of section 1, for comparison
        per_image = {key: 1000 * middle([r[key] for r in parallel]) / meta["images"]
                     for key in ("seconds", "cpu_s", "main_cpu_s")}  # fmt: skip
        rows += [
            ("the images_per_chunk=1 row of section 1 (2 parse threads + the caller)", f"{per_image['seconds']:.3f}",
             f"{per_image['cpu_s']:.3f} (all threads)", "-", "-"),
            ("  of which the caller's thread (next_minibatch: gather/pack, chunk loading)", "-",
             f"{per_image['main_cpu_s']:.3f}", "-", "-"),
            ("  of which the other threads (parse threads: read, decode, transform, chunks; OpenCV's)", "-",
             f"{per_image['cpu_s'] - per_image['main_cpu_s']:.3f}", "-", "-"),
        ]  # fmt: skip
    report.numbers["stages_per_image"] = stages
    report.section(
        f"## 2. Where cntkio's time goes: the first {count} images, one thread (cv2.setNumThreads(1)), per image "
        f"({check})",
        _table(("stage", "ms", "thread CPU ms", "minor page faults", "share of total"), rows),
    )


def memory_section(report: Report, args: argparse.Namespace, results: Results) -> None:
    expected = (args.window + MINIBATCH) * OUTPUT_BYTES
    rows, numbers = [], {}
    for label, (title, spec) in CNTKIO_ROWS.items():
        good = [r for r in results[label] if "failed" not in r]
        if not good:
            continue
        peak = middle([r["peak_growth"] for r in good])
        chunks = max(1, args.window // spec["images_per_chunk"])
        numbers[label] = {"peak_growth_bytes": peak, "expected_bytes": expected}
        rows.append((title, f"{chunks:,}", f"{peak / MIB:.0f}", f"{expected / MIB:.0f}", f"{peak / expected:.2f}",
                     "PASS" if peak <= expected else "FAIL"))  # fmt: skip
    report.numbers["memory"] = numbers
    report.section(
        f"## 3. Memory: peak RSS growth of the cntkio runs against the window ({args.window:,} images) + one "
        f"minibatch ({MINIBATCH}) of {OUTPUT_BYTES:,}-byte output images",
        _table(("reader", "window chunks", "peak growth MiB", "window + minibatch MiB", "ratio", "bar"), rows),
    )


def checks_section(report: Report, meta: dict[str, Any], results: Results) -> None:
    rows = []
    for label, (title, _) in {**CNTKIO_ROWS, **ANCHOR_ROWS}.items():
        check = results[f"{label} check"][0]
        if "failed" in check:
            rows.append((title, "-", "-", "-", "-", "-", "failed"))
            continue
        means = "/".join(f"{m:.1f}" for m in check["channel_means"])
        rows.append((title, f"{check['images']:,}", f"{check['distinct']:,}", f"{check['wrong_labels']}",
                     f"{check['label_min']}..{check['label_max']}",
                     f"{check['pixel_min']:.0f}..{check['pixel_max']:.0f}", means))  # fmt: skip
    report.section(
        f"## 4. Correctness (untimed children): every image once, labels as in the map ({meta['images']:,} images)",
        _table(("reader", "images", "distinct", "wrong labels", "labels", "pixels", "mean R/G/B"), rows),
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "200 images and one round")
    ap.add_argument("--images", type=int, default=3000, help="JPEGs generated (once) and read")
    ap.add_argument("--window", type=int, default=1000, help="cntkio's randomization window in images")
    ap.add_argument("--stage-images", type=int, default=500, help="images of the per-stage measurement")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.images, args.window, args.stage_images = 1, 200, 100, 200
    if args.images < 1 or args.window < 1:
        ap.error("--images and --window must be >= 1")

    t0 = time.perf_counter()
    meta = write_images(Path(args.data), args.images, args.stage_images)
    print(f"data: {meta['directory']} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    timed, checks = jobs_of(args, meta)
    rounds = Rounds(timed, checks, args.runs)
    results: Results = rounds.results
    report = Report()
    report.lines += [
        rounds.header("image bars"),
        "# times are medians of the runs, each in a fresh process; CPU s = user + system of all threads (and of the "
        "anchors' workers); MiB = 2^20 bytes",
        "",
    ]
    throughput_section(report, args, meta, results)
    stages_section(report, meta, results)
    memory_section(report, args, results)
    checks_section(report, meta, results)
    return report.finish(args, results, data=meta)


if __name__ == "__main__":
    sys.exit(main())
