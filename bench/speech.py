#!/usr/bin/env python3
"""Speech bars (HTK features + MLF labels): randomized frame mode against a NumPy baseline, the memory of the
index and labels of 10^5 utterances / 10^7 label segments, and how frame-mode memory scales with the corpus.

Every measurement runs in a fresh subprocess (imports untimed), round-robin over --runs rounds; the summary
shows medians. CPU seconds are the child's user + system time (all threads). RSS is read from
/proc/self/status (VmRSS now, VmHWM peak, restarted after imports); "kept" growth is taken after gc and
malloc_trim, so free heap pages do not count.

Reader under test: f = HTKFeatureDeserializer(StreamDefs(features=StreamDef(shape=40, scp=SCP))),
l = HTKMLFDeserializer(STATE_LIST, StreamDefs(labels=StreamDef(shape=3000, mlf=MLF))), joined by
MinibatchSource([f, l], frame_mode=True, randomization_window_in_samples=W, max_sweeps=1, randomization_seed=1).

  1. frame mode  --utterances utterances of 250..350 frames (40-dim float32, big-endian, USER kind) in
                 --archives HTK archives (cntkio.htk.write_archive, one SCP with ranged entries), labels in an
                 MLF of runs of 5..15 frames over 3000 states (cntkio.htk.write_mlf when present, else written
                 here: `#!MLF!#`, `"*/KEY.lab"`, `start end sN` in 100 ns units, `.`). Column 0 of every frame
                 holds its state id, so a misaligned join shows.
                   cntkio  timed from building f and l on: the source (window --window samples), then
                           next_minibatch(256) until {}; the loop only counts frames
                   NumPy   the archives already in memory as big-endian float32 (np.fromfile, untimed) and the
                           per-frame states already expanded from the runs (np.repeat, untimed); timed: the
                           byte swap of the corpus (astype('<f4')), a random permutation of every frame, and
                           per minibatch of 256 the gather of its frames and its one-hot labels as CSR arrays
                           (int32 column = state, ones, indptr)
                 frames/s of each, cntkio / NumPy (bar >= 0.50). Correctness, in separate (untimed) children
                 of the same two loops: frames read, float64 sum of every feature value, per-state label
                 counts, one non-zero of value 1 per label row, and column 0 == the label of the same frame;
                 both must match each other and the generator.
  2. index       --index-utterances utterances of 1000 frames in 4 archives: real HTK headers, the files
                 extended to their full size with truncate (sparse: the index reads headers only), and an MLF
                 of 100 label lines (10 frames each) per utterance (10^7 lines at 10^5 utterances). Timed and
                 measured one after the other: HTKFeatureDeserializer, HTKMLFDeserializer, then
                 MinibatchSource([f, l], frame_mode=True, ...) (the join). Kept RSS growth per utterance and
                 per label segment; bar: f + l kept <= 32 B x utterances + 8 B x label segments.
  3. scaling     frame mode over the same kind of sparse corpus at --scale-frames (10^6, 10^7, 10^8 frames:
                 10^3 .. 10^5 utterances; the 10^8 corpus is the index corpus), window --scale-window
                 samples: building f, l, the source and the first minibatch of 256 (its frames are read from
                 the sparse archives: zeros). Peak RSS growth per frame, and the growth between the smallest
                 and the largest corpus per added frame (the window is the same): bar < 8 B/frame, i.e. no
                 per-frame 8-byte array over the whole corpus.

A child that fails is a failed check. Exits 1 when a check is not ok (a missed bar is shown, not an error).

Data: $BENCH_DATA or ./bench-data, under speech/ (generated once per size, with NumPy).
  python bench/speech.py [--runs 3] [--utterances 2000] [--index-utterances 100000] [--json out.json]
  python bench/speech.py --smoke     # small sizes, one round: a sanity check in well under a minute
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import cntkio.htk
from cntkio import HTKFeatureDeserializer, HTKMLFDeserializer, MinibatchSource, StreamDef, StreamDefs
from cntkio.htk import ScpEntry, write_archive, write_scp
from composite import Results, failures, median, proc_status, relative, release_free_memory
from core import Report, cpu_seconds, reset_peak_rss
from ctf_parse import _table
from harness import Job, Rounds, parser, run_child

DIM = 40
NUM_STATES = 3000
MINIBATCH = 256
SEED = 1
HTK_UNIT = 100000  # 100 ns per frame (10 ms)
USER_KIND = 9
FRAME_LENGTHS = (250, 350)  # measurement 1: utterance lengths, inclusive
RUN_LENGTHS = (5, 15)  # measurement 1: label run lengths, inclusive
SPARSE_FRAMES = 1000  # measurements 2-3: frames per utterance
SPARSE_SEGMENTS = 100  # label lines per utterance, 10 frames each
SPARSE_ARCHIVES = 4
MLF_TEMPLATES = 64  # distinct label bodies of the big MLFs (utterance i takes body i % 64)
UTTERANCES_PER_BLOCK = 10000  # MLF text written at once
FRAME_BAR = 0.50  # cntkio / NumPy frames/s
INDEX_BAR_UTT, INDEX_BAR_SEGMENT = 32, 8  # bytes
SCALE_BAR = 8.0  # bytes per added frame
SAME_SUM = 1e-9  # float64 sums of the same float32 values in another order


def feature_defs(scp: str) -> Any:
    return StreamDefs(features=StreamDef(shape=DIM, scp=scp))


def label_defs(mlf: str) -> Any:
    return StreamDefs(labels=StreamDef(shape=NUM_STATES, mlf=mlf))


def frame_source(spec: dict[str, Any], features: Any, labels: Any) -> MinibatchSource:
    """The randomized frame-mode source every measurement reads."""
    return MinibatchSource(
        [features, labels],
        frame_mode=True,
        randomization_window_in_chunks=0,
        randomization_window_in_samples=spec["window"],
        randomization_seed=SEED,
        max_sweeps=1,
    )


def open_source(spec: dict[str, Any]) -> tuple[Any, Any, MinibatchSource]:
    features = HTKFeatureDeserializer(feature_defs(spec["scp"]), trace_level=0)
    labels = HTKMLFDeserializer(spec["states"], label_defs(spec["mlf"]), trace_level=0)
    return features, labels, frame_source(spec, features, labels)


# ------------------------------------------------------------------------------------------- children
class Check:
    """Order-independent totals of what a frame loop produced, and the problems seen on the way."""

    def __init__(self) -> None:
        self.frames = 0
        self.feature_sum = 0.0
        self.label_counts = np.zeros(NUM_STATES, dtype=np.int64)
        self.problems: list[str] = []

    def add(self, features: np.ndarray, columns: np.ndarray, values: np.ndarray, indptr: np.ndarray) -> None:
        n = features.shape[0]
        self.frames += n
        self.feature_sum += float(features.sum(dtype=np.float64))
        self.label_counts += np.bincount(columns, minlength=NUM_STATES)
        if len(self.problems) < 3:
            if features.shape != (n, DIM) or len(indptr) != n + 1 or not np.array_equal(np.diff(indptr), np.ones(n)):
                self.problems.append(f"minibatch of {n} frames: not one label per frame ({features.shape})")
            elif not (values == 1).all():
                self.problems.append("a label value is not 1")
            elif not np.array_equal(features[:, 0], columns.astype(np.float32)):
                self.problems.append("column 0 of a frame differs from its label: the join is misaligned")

    def result(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "feature_sum": self.feature_sum,
            "label_counts": self.label_counts.tolist(),
            "problems": self.problems,
        }


def child_cntkio(spec: dict[str, Any]) -> dict[str, Any]:
    """Measurement 1, cntkio: from building the deserializers to the last minibatch."""
    check = Check() if spec["check"] else None
    frames = minibatches = 0
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    _, _, source = open_source(spec)
    construct = time.perf_counter() - t0
    while minibatch := source.next_minibatch(MINIBATCH):
        minibatches += 1
        features = minibatch["features"]
        frames += features.num_samples
        if check is not None:
            labels = minibatch["labels"]
            check.add(features.values.reshape(-1, DIM), labels.indices, labels.values, labels.indptr)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    source.close()
    result = {"seconds": seconds, "cpu_s": cpu, "construct_s": construct, "frames": frames, "minibatches": minibatches}
    return {**result, **(check.result() if check is not None else {})}


def child_numpy(spec: dict[str, Any]) -> dict[str, Any]:
    """Measurement 1, NumPy baseline on data already in memory."""
    stored = np.concatenate([np.fromfile(path, dtype=">f4", offset=12).reshape(-1, DIM) for path in spec["archives"]])
    runs = np.load(spec["runs"])
    frame_states = np.repeat(runs["states"], runs["counts"])  # precomputed: labels already per frame
    check = Check() if spec["check"] else None
    frames = minibatches = 0
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    data = stored.astype("<f4")  # the byte swap (a reader swaps every chunk it reads)
    order = np.random.default_rng(SEED).permutation(len(data))
    for start in range(0, len(data), MINIBATCH):
        rows = order[start : start + MINIBATCH]
        features = data[rows]
        columns = frame_states[rows].astype(np.int32)
        values = np.ones(len(rows), dtype=np.float32)
        indptr = np.arange(len(rows) + 1, dtype=np.int64)
        minibatches += 1
        frames += len(rows)
        if check is not None:
            check.add(features, columns, values, indptr)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    result = {"seconds": seconds, "cpu_s": cpu, "frames": frames, "minibatches": minibatches}
    return {**result, **(check.result() if check is not None else {})}


def child_index(spec: dict[str, Any]) -> dict[str, Any]:
    """Measurement 2: the deserializers and the source, built one after the other; time and RSS of each."""
    release_free_memory()
    base = proc_status("VmRSS")
    reset_peak_rss()
    steps: dict[str, dict[str, float]] = {}
    previous = base

    def step(name: str, t0: float, cpu0: float) -> None:
        nonlocal previous
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        release_free_memory()
        now = proc_status("VmRSS")
        steps[name] = {"seconds": seconds, "cpu_s": cpu, "kept": now - previous, "peak": proc_status("VmHWM") - base}
        previous = now

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    features = HTKFeatureDeserializer(feature_defs(spec["scp"]), trace_level=0)
    step("features", t0, cpu0)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    labels = HTKMLFDeserializer(spec["states"], label_defs(spec["mlf"]), trace_level=0)
    step("labels", t0, cpu0)
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    source = frame_source(spec, features, labels)
    step("source", t0, cpu0)
    f_index, l_index = features.sequence_index(), labels.sequence_index()
    counts = {
        "feature_utterances": f_index.num_sequences,
        "label_utterances": l_index.num_sequences,
        "feature_frames": int(np.asarray(f_index.lengths, dtype=np.int64).sum()),
        "label_frames": int(np.asarray(l_index.lengths, dtype=np.int64).sum()),
    }
    counts["feature_index_bytes"] = features.describe()["index_bytes"]
    counts["label_index_bytes"] = labels.describe()["index_bytes"]
    source.close()
    return {"steps": steps, "peak_growth": proc_status("VmHWM") - base, **counts}


def child_scale(spec: dict[str, Any]) -> dict[str, Any]:
    """Measurement 3: frame mode to the first minibatch; peak RSS growth."""
    release_free_memory()
    base = proc_status("VmRSS")
    reset_peak_rss()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    features, _, source = open_source(spec)
    first = source.next_minibatch(MINIBATCH)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    peak = proc_status("VmHWM") - base
    problems = []
    x, y = first["features"], first["labels"]
    if x.num_samples != MINIBATCH or y.num_samples != MINIBATCH or len(y.indices) != MINIBATCH:
        problems.append(f"first minibatch: {x.num_samples} frames, {y.num_samples} labels, {len(y.indices)} nnz")
    utterances = features.sequence_index().num_sequences
    source.close()
    release_free_memory()
    kept = proc_status("VmRSS") - base
    return {"seconds": seconds, "cpu_s": cpu, "peak_growth": peak, "kept": kept, "utterances": utterances,
            "problems": problems}  # fmt: skip


CHILDREN = {"cntkio": child_cntkio, "numpy": child_numpy, "index": child_index, "scale": child_scale}


# ----------------------------------------------------------------------------------------------- data
def write_state_list(path: Path) -> None:
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(f"s{i}\n" for i in range(NUM_STATES)))
        tmp.rename(path)


def mlf_entry(key: str, states: np.ndarray, counts: np.ndarray) -> str:
    ends = np.cumsum(counts) * HTK_UNIT
    starts = ends - counts * HTK_UNIT
    body = "".join(f"{s} {e} s{state}\n" for s, e, state in zip(starts.tolist(), ends.tolist(), states.tolist()))
    return f'"*/{key}.lab"\n{body}.\n'


def write_frames_corpus(directory: Path, utterances: int, archives: int) -> dict[str, Any]:
    """Measurement 1's corpus (once per size): archives, SCP, MLF, the runs (.npz) and meta.json (last)."""
    meta_path = directory / "meta.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    lengths = rng.integers(FRAME_LENGTHS[0], FRAME_LENGTHS[1] + 1, utterances)
    total = int(lengths.sum())
    counts = rng.integers(RUN_LENGTHS[0], RUN_LENGTHS[1] + 1, total // RUN_LENGTHS[0] + utterances)
    run_counts: list[np.ndarray] = []
    position = 0
    for length in lengths.tolist():  # runs of each utterance: cut the last one at the utterance's end
        ends = np.cumsum(counts[position : position + length // RUN_LENGTHS[0] + 1])
        n = int(np.searchsorted(ends, length)) + 1
        mine = counts[position : position + n].copy()
        mine[-1] -= int(ends[n - 1]) - length
        run_counts.append(mine)
        position += n
    all_counts = np.concatenate(run_counts)
    all_states = rng.integers(0, NUM_STATES, len(all_counts)).astype(np.uint16)
    frame_states = np.repeat(all_states, all_counts)
    frames = rng.standard_normal((total, DIM), dtype=np.float32)
    frames[:, 0] = frame_states  # exact in float32: lets the check see a misaligned join
    keys = [f"utt{i:06d}" for i in range(utterances)]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    entries: list[ScpEntry] = []
    archive_paths = []
    for a, part in enumerate(np.array_split(np.arange(utterances), archives)):
        path = (directory / f"feats{a}.ark").resolve()
        archive = {keys[u]: frames[offsets[u] : offsets[u + 1]] for u in part.tolist()}
        entries += write_archive(path, archive)
        archive_paths.append(str(path))
    write_scp(directory / "feats.scp", entries)
    run_offsets = np.concatenate([[0], np.cumsum([len(c) for c in run_counts])])
    runs = [(all_states[run_offsets[u] : run_offsets[u + 1]], run_counts[u]) for u in range(utterances)]
    writer = getattr(cntkio.htk, "write_mlf", None)  # being added to cntkio.htk; written here when absent
    if writer is not None:
        labels = {}
        for key, (states, run_count) in zip(keys, runs):
            ends = np.cumsum(run_count).tolist()
            labels[key] = [(e - c, e, f"s{s}") for s, c, e in zip(states.tolist(), run_count.tolist(), ends)]
        writer(directory / "labels.mlf", labels)
    else:
        text = "#!MLF!#\n" + "".join(mlf_entry(key, states, c) for key, (states, c) in zip(keys, runs))
        (directory / "labels.mlf").write_text(text)
    np.savez(directory / "runs.npz", states=all_states, counts=all_counts)
    meta = {
        "utterances": utterances,
        "frames": total,
        "runs": len(all_counts),
        "feature_sum": float(frames.sum(dtype=np.float64)),
        "label_counts": np.bincount(frame_states, minlength=NUM_STATES).tolist(),
        "archives": archive_paths,
        "scp": str((directory / "feats.scp").resolve()),
        "mlf": str((directory / "labels.mlf").resolve()),
        "runs_npz": str((directory / "runs.npz").resolve()),
        "mlf_writer": "cntkio.htk.write_mlf" if writer is not None else "bench/speech.py",
    }
    meta_path.write_text(json.dumps(meta))
    return meta


def write_sparse_corpus(directory: Path, utterances: int) -> dict[str, Any]:
    """Measurements 2-3: utterances of 1000 frames in sparse archives (real headers, truncate) and their MLF."""
    meta_path = directory / "meta.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    directory.mkdir(parents=True, exist_ok=True)
    keys = [f"utt{i:07d}" for i in range(utterances)]
    entries: list[ScpEntry] = []
    for a, part in enumerate(np.array_split(np.arange(utterances), SPARSE_ARCHIVES)):
        if len(part) == 0:
            continue
        path = (directory / f"feats{a}.ark").resolve()
        frames = len(part) * SPARSE_FRAMES
        with open(path, "wb") as f:
            f.write(struct.pack(">iiHh", frames, HTK_UNIT, DIM * 4, USER_KIND))
            f.truncate(12 + frames * DIM * 4)
        entries += [
            ScpEntry(keys[u], str(path), i * SPARSE_FRAMES, (i + 1) * SPARSE_FRAMES - 1)
            for i, u in enumerate(part.tolist())
        ]
    write_scp(directory / "feats.scp", entries)
    rng = np.random.default_rng(SEED)
    run = SPARSE_FRAMES // SPARSE_SEGMENTS
    counts = np.full(SPARSE_SEGMENTS, run)
    bodies = [
        mlf_entry("@", rng.integers(0, NUM_STATES, SPARSE_SEGMENTS), counts).split("\n", 1)[1]
        for _ in range(MLF_TEMPLATES)
    ]
    tmp = directory / "labels.mlf.tmp"
    with open(tmp, "w") as f:
        f.write("#!MLF!#\n")
        for start in range(0, utterances, UTTERANCES_PER_BLOCK):
            block = range(start, min(start + UTTERANCES_PER_BLOCK, utterances))
            f.write("".join(f'"*/{keys[u]}.lab"\n{bodies[u % MLF_TEMPLATES]}' for u in block))
    tmp.rename(directory / "labels.mlf")
    meta = {
        "utterances": utterances,
        "frames": utterances * SPARSE_FRAMES,
        "segments": utterances * SPARSE_SEGMENTS,
        "scp": str((directory / "feats.scp").resolve()),
        "mlf": str((directory / "labels.mlf").resolve()),
        "mlf_mb": os.path.getsize(directory / "labels.mlf") / 1e6,
    }
    meta_path.write_text(json.dumps(meta))
    return meta


# --------------------------------------------------------------------------------------------- parent
@dataclass
class Corpora:
    states: str
    frames: dict[str, Any]
    index: dict[str, Any]
    scale: list[dict[str, Any]]


def prepare(args: argparse.Namespace) -> Corpora:
    data = Path(args.data) / "speech"
    data.mkdir(parents=True, exist_ok=True)
    states = data / f"states{NUM_STATES}.list"
    write_state_list(states)
    frames = write_frames_corpus(data / f"frames-u{args.utterances}-a{args.archives}", args.utterances, args.archives)
    index = write_sparse_corpus(data / f"sparse-u{args.index_utterances}", args.index_utterances)
    scale = []
    for total in args.scale_frames:
        utterances = max(1, total // SPARSE_FRAMES)
        scale.append(write_sparse_corpus(data / f"sparse-u{utterances}", utterances))
    return Corpora(str(states.resolve()), frames, index, scale)


def jobs_of(args: argparse.Namespace, corpora: Corpora) -> tuple[list[Job], list[Job]]:
    """(timed jobs of one round, in the order they run; correctness jobs, run once)."""
    frames = corpora.frames
    source = {"scp": frames["scp"], "mlf": frames["mlf"], "states": corpora.states, "window": args.window}
    baseline = {"archives": frames["archives"], "runs": frames["runs_npz"]}
    timed = [
        Job("frames cntkio", "cntkio", {**source, "check": False}),
        Job("frames numpy", "numpy", {**baseline, "check": False}),
        Job(
            "index",
            "index",
            {
                "scp": corpora.index["scp"],
                "mlf": corpora.index["mlf"],
                "states": corpora.states,
                "window": args.scale_window,
            },
        ),
    ]
    for corpus in corpora.scale:
        spec = {"scp": corpus["scp"], "mlf": corpus["mlf"], "states": corpora.states, "window": args.scale_window}
        timed.append(Job(f"scale {corpus['frames']}", "scale", spec))
    checks = [
        Job("frames cntkio check", "cntkio", {**source, "check": True}),
        Job("frames numpy check", "numpy", {**baseline, "check": True}),
    ]
    return timed, checks


def frame_check_problems(check: dict[str, Any], meta: dict[str, Any], other: dict[str, Any]) -> list[str]:
    if "failed" in check:
        return [check["failed"]]
    problems = list(check["problems"])
    for name, reference in (("generator", meta), ("the other reader", other)):
        if "failed" in reference:
            continue
        if check["frames"] != reference["frames"]:
            problems.append(f"{check['frames']} frames, {name}: {reference['frames']}")
        if relative(check["feature_sum"], reference["feature_sum"]) > SAME_SUM:
            problems.append(f"feature sum {check['feature_sum']:.12g}, {name}: {reference['feature_sum']:.12g}")
        if check["label_counts"] != reference["label_counts"]:
            differ = sum(a != b for a, b in zip(check["label_counts"], reference["label_counts"]))
            problems.append(f"label counts differ from {name}'s for {differ} states")
    return problems


def frames_section(report: Report, args: argparse.Namespace, corpora: Corpora, results: Results) -> None:
    meta = corpora.frames
    checks = {name: results[f"frames {name} check"][0] for name in ("cntkio", "numpy")}
    rows = []
    numbers: dict[str, Any] = {}
    for name, other in (("cntkio", "numpy"), ("numpy", "cntkio")):
        runs = results[f"frames {name}"]
        problems = failures(runs) + frame_check_problems(checks[name], meta, checks[other])
        problems += [
            f"run {i}: {r['frames']} frames"
            for i, r in enumerate(runs, 1)
            if r.get("frames", meta["frames"]) != meta["frames"]
        ]
        check = report.verdict(problems)
        good = [r for r in runs if "failed" not in r]
        if not good:
            rows.append((name, "-", "-", "-", "-", "-", "-", "-", "-", check))
            continue
        seconds, cpu = median(good, "seconds"), median(good, "cpu_s")
        construct = f"{median(good, 'construct_s'):.3f}" if name == "cntkio" else "-"
        spread = f"{min(r['seconds'] for r in good):.3f}-{max(r['seconds'] for r in good):.3f}"
        numbers[name] = {"seconds": seconds, "cpu_s": cpu, "frames_per_s": meta["frames"] / seconds, "check": check}
        rows.append((
            "cntkio MinibatchSource([f, l], frame_mode)" if name == "cntkio" else "NumPy baseline (in memory)",
            f"{meta['frames']:,}", f"{seconds:.3f}", spread, construct, f"{cpu:.3f}",
            f"{meta['frames'] / seconds:,.0f}", f"{meta['frames'] / cpu:,.0f}", f"{median(good, 'peak_rss_mb'):.0f}",
            check,
        ))  # fmt: skip
    tables = [
        _table(
            (
                "reader",
                "frames",
                "s",
                "s range",
                "construct s",
                "CPU s",
                "frames/s",
                "frames/CPU-s",
                "peak RSS MiB",
                "check",
            ),
            rows,
        )
    ]
    if "cntkio" in numbers and "numpy" in numbers:
        ratio = numbers["cntkio"]["frames_per_s"] / numbers["numpy"]["frames_per_s"]
        cpu_ratio = numbers["numpy"]["cpu_s"] / numbers["cntkio"]["cpu_s"]
        numbers["ratio"], numbers["cpu_ratio"] = ratio, cpu_ratio
        bar = "PASS" if ratio >= FRAME_BAR else "FAIL"
        tables.append(_table(
            ("ratio", "value", f"bar >= {FRAME_BAR:.2f}"),
            [("cntkio / NumPy, frames/s (wall)", f"{ratio:.2f}x", bar),
             ("cntkio / NumPy, frames per CPU-s", f"{cpu_ratio:.2f}x", "-")],
        ))  # fmt: skip
    report.numbers["frames"] = numbers
    report.section(
        f"## 1. Randomized frame mode: {meta['utterances']:,} utterances, {meta['frames']:,} frames x {DIM} float32 "
        f"(big-endian, {args.archives} archives), {meta['runs']:,} label runs over {NUM_STATES} states; window "
        f"{args.window:,} samples, minibatches of {MINIBATCH}, 1 sweep; MLF by {meta['mlf_writer']}",
        *tables,
    )


def index_section(report: Report, corpora: Corpora, results: Results) -> None:
    meta, runs = corpora.index, results["index"]
    utterances, segments = meta["utterances"], meta["segments"]
    problems = failures(runs)
    good = [r for r in runs if "failed" not in r]
    for i, r in enumerate(good, 1):
        got = (r["feature_utterances"], r["label_utterances"], r["feature_frames"], r["label_frames"])
        if got != (utterances, utterances, meta["frames"], meta["frames"]):
            problems.append(f"run {i}: utterances (features, labels), frames (features, labels) = {got}")
    check = report.verdict(problems)
    if not good:
        report.section("## 2. Index", f"failed: {check}")
        return
    rows = []
    numbers: dict[str, Any] = {"utterances": utterances, "segments": segments, "check": check}
    names = {
        "features": "HTKFeatureDeserializer (SCP + archive headers)",
        "labels": f"HTKMLFDeserializer ({meta['mlf_mb']:.0f} MB MLF)",
        "source": "MinibatchSource([f, l], frame_mode=True) (join)",
    }
    for step, title in names.items():
        seconds = float(np.median([r["steps"][step]["seconds"] for r in good]))
        cpu = float(np.median([r["steps"][step]["cpu_s"] for r in good]))
        kept = float(np.median([r["steps"][step]["kept"] for r in good]))
        peak = float(np.median([r["steps"][step]["peak"] for r in good]))
        numbers[step] = {"seconds": seconds, "cpu_s": cpu, "kept_bytes": kept, "peak_growth_bytes": peak}
        rows.append((title, f"{seconds:.3f}", f"{cpu:.3f}", f"{kept / 2**20:.1f}", f"{kept / utterances:.1f}",
                     f"{peak / 2**20:.1f}", check))  # fmt: skip
    total_s = sum(numbers[s]["seconds"] for s in names)
    rows.append(("total", f"{total_s:.3f}", f"{sum(numbers[s]['cpu_s'] for s in names):.3f}",
                 f"{sum(numbers[s]['kept_bytes'] for s in names) / 2**20:.1f}",
                 f"{sum(numbers[s]['kept_bytes'] for s in names) / utterances:.1f}",
                 f"{median(good, 'peak_growth') / 2**20:.1f}", check))  # fmt: skip
    kept = numbers["features"]["kept_bytes"] + numbers["labels"]["kept_bytes"]
    budget = INDEX_BAR_UTT * utterances + INDEX_BAR_SEGMENT * segments
    numbers["index_and_labels_bytes"], numbers["budget_bytes"] = kept, budget
    with_source = kept + numbers["source"]["kept_bytes"]
    f_arrays = float(np.median([r["feature_index_bytes"] for r in good]))
    l_arrays = float(np.median([r["label_index_bytes"] for r in good]))
    numbers["feature_index_bytes"], numbers["label_index_bytes"] = f_arrays, l_arrays
    bar_rows = [
        ("index + labels (f + l kept)", f"{kept / 2**20:.1f} MiB = {kept / utterances:.1f} B/utterance = "
         f"{kept / segments:.2f} B/segment", f"{budget / 2**20:.1f} MiB",
         "PASS" if kept <= budget else "FAIL"),
        ("  features alone (SCP index) per utterance",
         f"{numbers['features']['kept_bytes'] / utterances:.1f} B", "-", "-"),
        ("  arrays held (describe()['index_bytes']): features per utterance, labels per utterance / segment",
         f"{f_arrays / utterances:.1f} B; {l_arrays / utterances:.1f} B / {l_arrays / segments:.2f} B", "-", "-"),
        ("index + labels, arrays held", f"{(f_arrays + l_arrays) / utterances:.1f} B/utterance",
         f"{budget / utterances:.1f} B/utterance", "PASS" if f_arrays + l_arrays <= budget else "FAIL"),
        ("  labels alone per utterance / per segment (all their bytes over the segments)",
         f"{numbers['labels']['kept_bytes'] / utterances:.1f} B / {numbers['labels']['kept_bytes'] / segments:.2f} B",
         "-", "-"),
        ("with the source's join (f + l + source kept)", f"{with_source / utterances:.1f} B/utterance",
         f"{budget / utterances:.1f} B/utterance", "PASS" if with_source <= budget else "FAIL"),
    ]  # fmt: skip
    report.numbers["index"] = numbers
    report.section(
        f"## 2. Index of {utterances:,} utterances x {SPARSE_FRAMES} frames (4 sparse archives) and its MLF of "
        f"{segments:,} label lines; built one after the other, kept = RSS growth after gc + malloc_trim",
        _table(("step", "s", "CPU s", "kept MiB", "kept B/utt", "peak growth MiB", "check"), rows),
        _table(("bar: <= 32 B/utterance + 8 B/segment", "measured", "budget", "bar"), bar_rows),
    )


def scale_section(report: Report, args: argparse.Namespace, corpora: Corpora, results: Results) -> None:
    rows = []
    points = []
    for corpus in corpora.scale:
        runs = results[f"scale {corpus['frames']}"]
        good = [r for r in runs if "failed" not in r]
        problems = failures(runs) + [p for r in good for p in r["problems"]]
        problems += [f"{r['utterances']} utterances" for r in good if r["utterances"] != corpus["utterances"]]
        check = report.verdict(problems)
        if not good:
            rows.append((f"{corpus['frames']:,}", f"{corpus['utterances']:,}", "-", "-", "-", "-", "-", check))
            continue
        peak, kept = median(good, "peak_growth"), median(good, "kept")
        points.append((corpus["frames"], peak))
        rows.append((f"{corpus['frames']:,}", f"{corpus['utterances']:,}", f"{median(good, 'seconds'):.3f}",
                     f"{median(good, 'cpu_s'):.3f}", f"{peak / 2**20:.1f}", f"{peak / corpus['frames']:.3f}",
                     f"{kept / 2**20:.1f}", check))  # fmt: skip
    numbers: dict[str, Any] = {"points": points}
    tables = [_table(("frames", "utterances", "to 1st minibatch s", "CPU s", "peak growth MiB", "peak B/frame",
                      "kept, f + l alive, MiB", "check"), rows)]  # fmt: skip
    if len(points) >= 2:
        (f0, p0), (f1, p1) = points[0], points[-1]
        slope = (p1 - p0) / (f1 - f0)
        numbers["bytes_per_added_frame"] = slope
        tables.append(_table(
            ("scaling", "value", f"bar < {SCALE_BAR:.0f} B/frame"),
            [(f"peak growth per added frame, {f0:,} -> {f1:,} frames", f"{slope:.3f} B/frame",
              "PASS" if slope < SCALE_BAR else "FAIL")],
        ))  # fmt: skip
    report.numbers["scale"] = numbers
    report.section(
        f"## 3. Frame mode memory scaling: build f, l, the source (window {args.scale_window:,} samples) and the "
        f"first minibatch of {MINIBATCH}; utterances of {SPARSE_FRAMES} frames in sparse archives (frames read "
        "as zeros), 100 label segments each",
        *tables,
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "small sizes and one round")
    ap.add_argument("--utterances", type=int, default=2000, help="measurement 1: utterances (~300 frames each)")
    ap.add_argument("--archives", type=int, default=4, help="measurement 1: HTK archives")
    ap.add_argument("--window", type=int, default=200000, help="measurement 1: randomization window in samples")
    ap.add_argument("--index-utterances", type=int, default=10**5, help="measurement 2: utterances (1000 frames)")
    ap.add_argument("--scale-frames", type=int, nargs="+", default=[10**6, 10**7, 10**8], help="measurement 3")
    ap.add_argument("--scale-window", type=int, default=500000, help="measurements 2-3: window in samples")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.utterances, args.window = 1, 300, 30000
        args.index_utterances, args.scale_frames, args.scale_window = 10**4, [10**5, 10**6], 50000
    args.scale_frames = sorted(set(args.scale_frames))

    t0 = time.perf_counter()
    corpora = prepare(args)
    print(f"data: {Path(args.data) / 'speech'} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    timed, checks = jobs_of(args, corpora)
    rounds = Rounds(timed, checks, args.runs)
    results: Results = rounds.results
    report = Report()
    report.lines += [
        rounds.header("speech bars"),
        "# times are medians of the runs, each in a fresh process; CPU s = user + system; MiB = 2^20 bytes",
        "",
    ]
    frames_section(report, args, corpora, results)
    index_section(report, corpora, results)
    scale_section(report, args, corpora, results)
    for runs in results.values():  # the per-state counts are long (in --json); the check keeps them
        for r in runs:
            r.pop("label_counts", None)
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
