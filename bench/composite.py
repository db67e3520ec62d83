#!/usr/bin/env python3
"""Composite reader bars: MinibatchSource([d1, d2, ...]) joining deserializers by sequence key, against reading
one file that holds every stream, and the cost of building the join at 10^6 keys.

Every measurement runs in a fresh subprocess (imports untimed), round-robin over --runs rounds; the summary
shows medians. CPU seconds are the child's user + system time (all threads).

  1. ATIS        atis.train.ctf (S0 943, S1 26, S2 129, all sparse; S1 only on the first line of a sequence) is
                 split into three CTF files, one per stream: each line keeps its sequence id and that stream's
                 `|Sx ...` entry (comments dropped, lines without the stream dropped). The S0 file keeps the
                 original order; the S1 and S2 files list whole sequences in a shuffled order (fixed seed, lines
                 within a sequence in order). Randomized (randomization_seed=1, default window), max_sweeps =
                 --atis-sweeps, next_minibatch(M) until {} for M = 1024 and 64:
                   single     MinibatchSource(CTFDeserializer(atis.train.ctf, S0 + S1 + S2))
                   composite  MinibatchSource([CTFDeserializer(S0 file), CTFDeserializer(S1 file),
                              CTFDeserializer(S2 file)])
                 Timed: construct = deserializers + source (indexing, and the join for the composite); read =
                 every minibatch after that (the steady part); total = both. The timed loop only counts
                 minibatches and sequences, so the ratio measures the reader, not a consumer. Sequences/s and
                 samples/s, and composite / single (throughput; bar >= 0.80 at both minibatch sizes).
                 Correctness, in separate (untimed) children of the same configurations, with sums that depend
                 neither on the order nor on the split: per stream the samples, the nonzeros and W = sum(value *
                 (1 + column)) over every sample read; and, so that a wrong join shows, sum over sequences of
                 W(S0) * W(S1) and W(S0) * W(S2), and sum over samples of W(S0) * W(S2) (same line of the text).
                 They must equal the text's own (parsed here) x sweeps for both readers, and so each other, as
                 must the sequences read (every key is in every file: nothing is dropped); the timed runs must
                 read as many sequences and minibatches as the correctness run.
  2. join        --join-keys one-line sequences, primary `ID |a 1` in key order, secondary `ID |b ID` (its value
                 is its key, so a wrong join shows) in shuffled order, three cases:
                   numeric        CTF + CTF, numeric ids 0..n-1
                   string         the CTF primary + a plug-in Deserializer whose keys are the decimal strings
                                  of the shuffled ids (text keys meet numeric keys by decimal text)
                   string-string  two plug-ins, keys utt_000123 (primary in order, secondary shuffled)
                   reference      MinibatchSource(CTF primary) alone: what any source keeps, join or not
                                  (no bars)
                 The child builds both deserializers and forces their indexes (d.sequence_index()), collects
                 garbage and trims the heap (malloc_trim), takes VmRSS (/proc/self/status) and restarts the VmHWM
                 mark; it times MinibatchSource([primary, secondary], randomize=False, max_sweeps=1). Per key:
                 kept = VmRSS growth after it (the heap trimmed again, so the free pages its temporaries left do
                 not count) and peak = VmHWM growth. Bars: <= 1 s, <= 24 B/key (shown for kept and for peak).
                 Then the first minibatch of 1024 (time shown, not a bar: it parses chunks), checked: 1024
                 sequences of 1 sample, keys 0..1023 in order, a = 1 and b = the key.

A child that fails is a failed check. Exits 1 when a check is not ok.

Data: $BENCH_DATA or ./bench-data (the ATIS split is rewritten every run, the join files once per size).
  python bench/composite.py [--runs 3] [--atis-sweeps 100] [--join-keys 1000000] [--json out.json]
  python bench/composite.py --smoke      # one round, 1 sweep, 10^5 keys: a sanity check in well under a minute
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import (
    ChunkIndex,
    CTFDeserializer,
    DenseStream,
    Deserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    StreamInformation,
    _native,
)
from core import Report, cpu_seconds, reset_peak_rss
from ctf_parse import REPO_ROOT, _table
from harness import Job, Rounds, parser, run_child

ATIS_STREAMS = (("S0", 943), ("S1", 26), ("S2", 129))  # all sparse
ATIS_MINIBATCHES = (1024, 64)
ATIS_BAR = 0.80  # composite / single throughput
SEED = 1  # randomization_seed, and the shuffles of the secondary files
JOIN_CASES = {
    "numeric": "CTF numeric ids + CTF numeric ids",
    "string": "CTF numeric ids + plug-in decimal-string keys",
    "string-string": "plug-in utt_ keys + plug-in utt_ keys",
    "reference": "CTF numeric ids alone (no join)",
}
REFERENCE = "reference"  # MinibatchSource(primary): what any source keeps, join or not; no bars
JOIN_MINIBATCH = 1024
JOIN_CHUNK = 1 << 16  # sequences per plug-in chunk
JOIN_BAR_S = 1.0
JOIN_BAR_BYTES = 24.0
LINES_PER_BLOCK = 1_000_000  # lines generated at once
SAME_SUM = 1e-12  # sums of integers in float64: exact in practice


# ------------------------------------------------------------------------------------------- children
def proc_status(field: str) -> int:
    """A byte count from /proc/self/status (VmRSS: resident now, VmHWM: peak resident)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def release_free_memory() -> None:
    """Collects garbage and returns free heap pages to the OS (glibc), so a baseline RSS holds live data only."""
    gc.collect()
    _native.release_free_memory()


def atis_defs(names: Sequence[str]) -> Any:
    dims = dict(ATIS_STREAMS)
    return StreamDefs(**{name: StreamDef(field=name, shape=dims[name], is_sparse=True) for name in names})


def atis_source(spec: dict[str, Any]) -> MinibatchSource:
    """The source of one ATIS configuration."""
    names = [name for name, _ in ATIS_STREAMS]
    if spec["mode"] == "single":
        deserializers: list[Deserializer] = [CTFDeserializer(spec["file"], atis_defs(names))]
    else:
        deserializers = [CTFDeserializer(spec["split"][name], atis_defs([name])) for name in names]
    return MinibatchSource(
        deserializers if len(deserializers) > 1 else deserializers[0],
        randomization_seed=SEED,
        max_sweeps=spec["sweeps"],
    )


def child_atis(spec: dict[str, Any]) -> dict[str, Any]:
    """Timed: construction, then next_minibatch until {} counting minibatches and sequences only."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    source = atis_source(spec)
    t1 = time.perf_counter()
    minibatches = sequences = 0
    size = spec["minibatch"]
    while minibatch := source.next_minibatch(size):
        minibatches += 1
        sequences += next(iter(minibatch.values())).num_sequences
    t2 = time.perf_counter()
    cpu = cpu_seconds() - cpu0
    source.close()
    return {
        "construct_s": t1 - t0,
        "read_s": t2 - t1,
        "seconds": t2 - t0,
        "cpu_s": cpu,
        "minibatches": minibatches,
        "sequences": sequences,
    }


def child_atis_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Untimed: the same reads, with per stream samples, nonzeros and sum(value * (1 + column)) (see
    sample_weights), and the pair sums that tie the streams of a sequence together (see pair_names)."""
    source = atis_source(spec)
    primary, others = ATIS_STREAMS[0][0], [name for name, _ in ATIS_STREAMS[1:]]
    minibatches = sequences = 0
    problems: list[str] = []
    streams: dict[str, list[float]] = {}
    pairs = dict.fromkeys(pair_names(spec["sample_pairs"]), 0.0)
    while minibatch := source.next_minibatch(spec["minibatch"]):
        minibatches += 1
        counts = {data.num_sequences for data in minibatch.values()}
        if len(counts) != 1:
            problems.append(f"minibatch {minibatches}: streams disagree on the number of sequences: {counts}")
            continue
        sequences += counts.pop()
        weights: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for info, data in minibatch.items():
            per_sample, nonzeros = sample_weights(data)
            rows = np.repeat(np.arange(data.num_sequences), data.sequence_lengths)
            per_sequence = np.bincount(rows, per_sample, minlength=data.num_sequences)
            weights[info.name] = (per_sample, per_sequence, data.sequence_lengths)
            total = streams.setdefault(info.name, [0, 0, 0.0])
            total[0] += data.num_samples
            total[1] += nonzeros
            total[2] += float(per_sample.sum())
        for other in others:
            pairs[f"{primary}*{other} per sequence"] += float(np.dot(weights[primary][1], weights[other][1]))
        for other in spec["sample_pairs"]:
            if not np.array_equal(weights[primary][2], weights[other][2]):
                problems.append(f"minibatch {minibatches}: {primary} and {other} differ in sequence lengths")
                continue
            pairs[f"{primary}*{other} per sample"] += float(np.dot(weights[primary][0], weights[other][0]))
    source.close()
    return {
        "minibatches": minibatches,
        "sequences": sequences,
        "streams": streams,
        "pairs": pairs,
        "problems": problems[:3] + ([f"... {len(problems)} problems in all"] if len(problems) > 3 else []),
    }


def sample_weights(data: Any) -> tuple[np.ndarray, int]:
    """Per sample of a sparse MinibatchData: sum(value * (1 + column)) (float64), and the number of nonzeros."""
    assert data.is_sparse and data.indptr is not None and data.indices is not None
    a, b = int(data.indptr[0]), int(data.indptr[-1])
    entries = data.values[a:b].astype(np.float64) * (1.0 + data.indices[a:b].astype(np.float64))
    rows = np.repeat(np.arange(data.num_samples), np.diff(data.indptr))
    return np.bincount(rows, entries, minlength=data.num_samples), b - a


def pair_names(sample_pairs: Sequence[str]) -> list[str]:
    """Sums that only a correct join keeps: per sequence, the primary stream's weight times each other stream's;
    per sample, the same for the streams sample-aligned with the primary (same line of the file)."""
    primary = ATIS_STREAMS[0][0]
    names = [f"{primary}*{name} per sequence" for name, _ in ATIS_STREAMS[1:]]
    return names + [f"{primary}*{name} per sample" for name in sample_pairs]


class KeyedData(Deserializer):
    """Plug-in: one dense stream of dim 1, one sample per sequence, the given keys (strings) and values,
    JOIN_CHUNK sequences per chunk."""

    def __init__(self, name: str, keys: list[str], values: np.ndarray):
        self.keys = keys
        self.values = values.astype(np.float32).reshape(-1, 1)
        self.starts = [*range(0, len(keys), JOIN_CHUNK), len(keys)]
        self.info = StreamInformation(name, 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return len(self.starts) - 1

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self.starts[chunk_id], self.starts[chunk_id + 1]
        return ChunkIndex(chunk_id, self.keys[a:b], np.ones(b - a, dtype=np.int64))

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        a, b = self.starts[chunk_id], self.starts[chunk_id + 1]
        return {self.info.name: DenseStream(self.values[a:b], np.arange(b - a + 1, dtype=np.int64))}


def utt_keys(ids: np.ndarray) -> list[str]:
    return [f"utt_{i:06d}" for i in ids.tolist()]


def join_deserializers(spec: dict[str, Any]) -> tuple[Deserializer, Deserializer]:
    case, keys = spec["case"], spec["keys"]
    order = shuffled_ids(keys)
    if case == "string-string":
        ids = np.arange(keys, dtype=np.int64)
        return KeyedData("a", utt_keys(ids), np.ones(keys)), KeyedData("b", utt_keys(order), order)
    primary = CTFDeserializer(spec["primary"], StreamDefs(a=StreamDef(field="a", shape=1)))
    if case == "numeric":
        return primary, CTFDeserializer(spec["secondary"], StreamDefs(b=StreamDef(field="b", shape=1)))
    return primary, KeyedData("b", order.astype(str).tolist(), order)


def first_minibatch_problems(minibatch: Any, case: str, names: Sequence[str]) -> list[str]:
    """1024 sequences of one sample, the primary's first keys in order, a = 1 and b = the key."""
    try:
        keys = [key for _, key in minibatch.sequence_keys]
        ids = np.array([int(str(key).removeprefix("utt_")) if case == "string-string" else int(key) for key in keys])
        problems = []
        if not np.array_equal(ids, np.arange(JOIN_MINIBATCH)):
            problems.append(f"keys {keys[:3]}... are not the first {JOIN_MINIBATCH} in order")
        for name in names:
            data = minibatch[name]
            if data.num_sequences != JOIN_MINIBATCH or not np.all(data.sequence_lengths == 1):
                problems.append(f"{name}: {data.num_sequences} sequences, lengths {data.sequence_lengths[:5]}...")
            values, expected = data.values.reshape(-1), np.ones(len(ids)) if name == "a" else ids
            if not np.array_equal(values, expected.astype(np.float32)):
                problems.append(f"{name}: values {values[:5]}..., expected {expected[:5]}...")
        return problems
    except Exception as error:
        return [f"first minibatch: {type(error).__name__}: {error}"]


def child_join(spec: dict[str, Any]) -> dict[str, Any]:
    """Builds the join of two indexed deserializers (or, alone, a source over the primary only): time, RSS and
    peak growth; checks the first minibatch."""
    primary, secondary = join_deserializers(spec)
    indexed = [d.sequence_index().num_sequences for d in (primary, secondary)]
    release_free_memory()
    base = proc_status("VmRSS")
    reset_peak_rss()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    source = MinibatchSource(primary if spec["alone"] else [primary, secondary], randomize=False, max_sweeps=1)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    untrimmed = proc_status("VmRSS")
    release_free_memory()  # what the source keeps, without the heap pages its temporaries left free
    built_rss, built_peak = proc_status("VmRSS"), proc_status("VmHWM")
    t1 = time.perf_counter()
    minibatch = source.next_minibatch(JOIN_MINIBATCH)
    first_s = time.perf_counter() - t1
    problems = [f"indexed {n} sequences, expected {spec['keys']}" for n in indexed if n != spec["keys"]]
    problems += first_minibatch_problems(minibatch, spec["case"], ["a"] if spec["alone"] else ["a", "b"])
    source.close()
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "base_rss": base,
        "rss_growth": built_rss - base,
        "untrimmed_rss_growth": untrimmed - base,
        "peak_growth": built_peak - base,
        "first_s": first_s,
        "first_peak_growth": proc_status("VmHWM") - base,
        "problems": problems,
    }


CHILDREN = {"atis": child_atis, "atis-check": child_atis_check, "join": child_join}


# ------------------------------------------------------------------------------------------------ data
def shuffled_ids(n: int) -> np.ndarray:
    """0..n-1 in the secondary files' shuffled order (fixed seed)."""
    return np.random.default_rng(SEED).permutation(n).astype(np.int64)


def decimal_lines(fields: Sequence[bytes | np.ndarray]) -> bytes:
    """Lines that concatenate the fields: byte strings, the same in every line, and columns of non-negative
    integers written in decimal (all of one length, the number of lines). Vectorized: one pass per byte of a
    constant and per digit position of a column."""
    lines = next(len(f) for f in fields if isinstance(f, np.ndarray))
    powers = 10 ** np.arange(1, 19, dtype=np.int64)
    widths = [
        np.full(lines, len(f), dtype=np.int64) if isinstance(f, bytes) else 1 + np.searchsorted(powers, f, "right")
        for f in fields
    ]
    ends = np.cumsum(np.sum(widths, axis=0))
    out = np.empty(int(ends[-1]) if lines else 0, dtype=np.uint8)
    position = ends - np.sum(widths, axis=0)
    for field, width in zip(fields, widths):
        if isinstance(field, bytes):
            for k, byte in enumerate(field):
                out[position + k] = byte
        else:
            values = field.astype(np.int64)
            for digit in range(int(width.max()) if lines else 0):
                has = width > digit
                out[(position + width - 1 - digit)[has]] = 48 + (values[has] // 10**digit) % 10
        position += width
    return out.tobytes()


def write_atomically(path: Path, blocks: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for block in blocks:
            f.write(block)
    tmp.replace(path)


def write_join_files(data: Path, keys: int) -> dict[str, str]:
    """`ID |a 1` for ids in order and `ID |b ID` for the shuffled ids (written once per size)."""
    primary, secondary = data / f"join_{keys}_a.ctf", data / f"join_{keys}_b_s{SEED}.ctf"
    if not primary.exists():
        blocks = range(0, keys, LINES_PER_BLOCK)
        write_atomically(
            primary,
            (decimal_lines([np.arange(s, min(s + LINES_PER_BLOCK, keys)), b" |a 1\n"]) for s in blocks),
        )
    if not secondary.exists():
        order = shuffled_ids(keys)
        blocks = range(0, keys, LINES_PER_BLOCK)
        write_atomically(
            secondary,
            (
                decimal_lines([order[s : s + LINES_PER_BLOCK], b" |b ", order[s : s + LINES_PER_BLOCK], b"\n"])
                for s in blocks
            ),
        )
    return {"primary": str(primary), "secondary": str(secondary)}


@dataclass
class AtisSplit:
    files: dict[str, str]  # stream name -> its CTF file
    sequences: int
    streams: dict[str, list[float]]  # stream name -> [samples, nonzeros, sum(value * (1 + column))], one sweep
    sample_pairs: list[str]  # the streams with a sample on every line the primary has one (and only there)
    pairs: dict[str, float]  # pair_names(sample_pairs) -> its sum, one sweep


def split_atis(source: Path, data: Path) -> AtisSplit:
    """One CTF file per stream (see the module docstring), and the text's own totals per stream."""
    names = [name for name, _ in ATIS_STREAMS]
    primary = names[0]
    # in file order: id, stream -> its lines, and per line stream -> sum(value * (1 + column))
    sequences: list[tuple[str, dict[str, list[str]], list[dict[str, float]]]] = []
    totals: dict[str, list[float]] = {name: [0, 0, 0.0] for name in names}
    with open(source) as f:
        for number, line in enumerate(f, 1):
            head, *parts = line.rstrip("\r\n").split("|")
            key = head.strip()
            if not key:
                sys.exit(f"{source}:{number}: a line without a sequence id")
            if not sequences or sequences[-1][0] != key:
                sequences.append((key, {name: [] for name in names}, []))
            weights: dict[str, float] = {}
            for part in parts:
                entry = part.strip()
                name, _, rest = entry.partition(" ")
                if name not in totals:
                    if not name.startswith("#"):
                        sys.exit(f"{source}:{number}: unexpected stream {name!r}")
                    continue
                if name in weights:
                    sys.exit(f"{source}:{number}: stream {name} twice on a line")
                sequences[-1][1][name].append(f"{key}\t|{entry}\n")
                pairs = [pair.split(":") for pair in rest.split()]
                weights[name] = math.fsum(float(value) * (1 + int(column)) for column, value in pairs)
                total = totals[name]
                total[0] += 1
                total[1] += len(pairs)
                total[2] += weights[name]
            sequences[-1][2].append(weights)
    if len({key for key, _, _ in sequences}) != len(sequences):
        sys.exit(f"{source}: a sequence id occurs in two places")
    lines = [weights for _, _, lines in sequences for weights in lines]
    sample_pairs = [name for name in names[1:] if all((primary in w) == (name in w) for w in lines)]
    sums = dict.fromkeys(pair_names(sample_pairs), 0.0)
    for _, _, sequence in sequences:
        for name in names[1:]:
            product = sum(w.get(primary, 0.0) for w in sequence) * sum(w.get(name, 0.0) for w in sequence)
            sums[f"{primary}*{name} per sequence"] += product
        for name in sample_pairs:
            sums[f"{primary}*{name} per sample"] += sum(w[primary] * w[name] for w in sequence if primary in w)
    rng = np.random.default_rng(SEED)
    files = {}
    for number, name in enumerate(names):
        order = np.arange(len(sequences)) if number == 0 else rng.permutation(len(sequences))
        path = data / f"{source.stem}.composite.{name}.ctf"
        write_atomically(path, ["".join(line for i in order.tolist() for line in sequences[i][1][name]).encode()])
        files[name] = str(path)
    return AtisSplit(files, len(sequences), totals, sample_pairs, sums)


# --------------------------------------------------------------------------------------------- parent
def jobs_of(args: argparse.Namespace, split: AtisSplit, join_files: dict[str, str]) -> tuple[list[Job], list[Job]]:
    """(timed jobs of one round, in the order they run; correctness jobs, run once)."""
    timed: list[Job] = []
    checks: list[Job] = []
    for size in ATIS_MINIBATCHES:
        for mode in ("single", "composite"):
            spec = {
                "mode": mode,
                "file": args.atis,
                "split": split.files,
                "minibatch": size,
                "sweeps": args.atis_sweeps,
                "sample_pairs": split.sample_pairs,
            }
            timed.append(Job(f"atis {mode} {size}", "atis", spec))
            checks.append(Job(f"atis {mode} {size} check", "atis-check", spec))
    for case in JOIN_CASES:
        spec = {"case": case, "keys": args.join_keys, "alone": case == REFERENCE, **join_files}
        timed.append(Job(f"join {case}", "join", spec))
    return timed, checks


Results = dict[str, list[dict[str, Any]]]


def median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def failures(runs: list[dict[str, Any]]) -> list[str]:
    return [f"run {number}: {r['failed']}" for number, r in enumerate(runs, 1) if "failed" in r]


def atis_check_problems(check: dict[str, Any], split: AtisSplit, sweeps: int) -> list[str]:
    """A correctness child's totals against the text's x sweeps."""
    if "failed" in check:
        return [check["failed"]]
    problems = list(check["problems"])
    if check["sequences"] != split.sequences * sweeps:
        problems.append(f"{check['sequences']} sequences, expected {split.sequences * sweeps}")
    for name, (samples, nonzeros, weighted) in split.streams.items():
        got = check["streams"].get(name)
        if got is None:
            problems.append(f"no stream {name}")
        elif got[:2] != [samples * sweeps, nonzeros * sweeps] or relative(got[2], weighted * sweeps) > SAME_SUM:
            problems.append(
                f"{name}: samples, nonzeros, sum {got}; text x {sweeps}: "
                f"{[samples * sweeps, nonzeros * sweeps, weighted * sweeps]}"
            )
    for name, expected in split.pairs.items():
        got = check["pairs"].get(name)
        if got is None or relative(got, expected * sweeps) > SAME_SUM:
            problems.append(f"{name}: {got}; text x {sweeps}: {expected * sweeps}")
    return problems


def totals_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two correctness children's totals differ (sums within SAME_SUM)."""
    flat_a = [a["sequences"], *[v for name in sorted(a["streams"]) for v in a["streams"][name]], *a["pairs"].values()]
    flat_b = [b["sequences"], *[v for name in sorted(b["streams"]) for v in b["streams"][name]], *b["pairs"].values()]
    return (
        sorted(a["streams"]) != sorted(b["streams"])
        or list(a["pairs"]) != list(b["pairs"])
        or any(relative(x, y) > SAME_SUM for x, y in zip(flat_a, flat_b))
    )


def atis_section(report: Report, args: argparse.Namespace, split: AtisSplit, results: Results) -> None:
    sweeps = args.atis_sweeps
    sequences = split.sequences * sweeps
    samples = int(split.streams["S0"][0]) * sweeps  # S0 and S2: one sample per line; S1: one per sequence
    rows: list[tuple[str, ...]] = []
    ratio_rows: list[tuple[str, ...]] = []
    numbers: dict[str, Any] = {}
    for size in ATIS_MINIBATCHES:
        speed: dict[str, tuple[float, float]] = {}
        checks = {mode: results[f"atis {mode} {size} check"][0] for mode in ("single", "composite")}
        for mode in ("single", "composite"):
            runs, check = results[f"atis {mode} {size}"], checks[mode]
            problems = failures(runs) + atis_check_problems(check, split, sweeps)
            ok = [r for r in runs if "failed" not in r]
            problems += [
                f"run {number}: {r['sequences']} sequences, {r['minibatches']} minibatches; check run: "
                f"{check['sequences']}, {check['minibatches']}"
                for number, r in enumerate(ok, 1)
                if "failed" not in check
                and (r["sequences"], r["minibatches"]) != (check["sequences"], check["minibatches"])
            ]
            single = checks["single"]
            if (
                mode == "composite"
                and "failed" not in single
                and "failed" not in check
                and totals_differ(check, single)
            ):
                problems.append("totals differ from the single file's")
            verdict = report.verdict(problems)
            if not ok:
                rows.append((str(size), mode, "failed", *["-"] * 8, verdict))
                numbers[f"{mode} {size}"] = {"check": verdict}
                continue
            construct, read, total = (median(ok, key) for key in ("construct_s", "read_s", "seconds"))
            cpu = median(ok, "cpu_s")
            speed[mode] = (read, total)
            numbers[f"{mode} {size}"] = {
                "construct_s": construct,
                "read_s": read,
                "seconds": total,
                "cpu_s": cpu,
                "minibatches": ok[0]["minibatches"],
                "sequences": sequences,
                "samples": samples,
                "read_sequences_per_s": sequences / read,
                "read_samples_per_s": samples / read,
                "sequences_per_s": sequences / total,
                "samples_per_s": samples / total,
                "check": verdict,
            }
            rows.append(
                (
                    str(size),
                    mode,
                    f"{construct * 1e3:.1f}",
                    f"{read:.3f}",
                    f"{total:.3f}",
                    f"{min(r['seconds'] for r in ok):.3f}-{max(r['seconds'] for r in ok):.3f}",
                    f"{cpu:.3f}",
                    f"{sequences / read:,.0f}",
                    f"{samples / read:,.0f}",
                    f"{sequences / total:,.0f}",
                    f"{samples / total:,.0f}",
                    verdict,
                )
            )
        if len(speed) == 2:
            read_ratio = speed["single"][0] / speed["composite"][0]
            total_ratio = speed["single"][1] / speed["composite"][1]
            numbers[f"composite / single {size}"] = {"read": read_ratio, "total": total_ratio}
            ratio_rows.append(
                (
                    str(size),
                    f"{read_ratio:.2f}x",
                    "PASS" if read_ratio >= ATIS_BAR else "FAIL",
                    f"{total_ratio:.2f}x",
                    "PASS" if total_ratio >= ATIS_BAR else "FAIL",
                )
            )
        else:  # a reader failed every run: no ratio (its row and check say so)
            numbers[f"composite / single {size}"] = "failed"
            ratio_rows.append((str(size), "failed", "-", "-", "-"))
    report.numbers["atis"] = numbers
    header = (
        "minibatch",
        "reader",
        "construct ms",
        "read s",
        "total s",
        "total s range",
        "CPU s",
        "seq/s read",
        "samples/s read",
        "seq/s total",
        "samples/s total",
        "check",
    )
    size_mb = os.path.getsize(args.atis) / 1e6
    report.section(
        f"## 1. ATIS train ({size_mb:.2f} MB, {split.sequences} sequences, {samples // sweeps} samples) one file vs "
        f"three (S0 in order, S1 and S2 shuffled), randomized (seed {SEED}), {sweeps} sweeps; "
        "read = after the constructor, total = from building the deserializers on",
        _table(header, rows),
        _table(
            (
                "minibatch",
                "composite / single, read",
                f"bar >= {ATIS_BAR:.2f}",
                "composite / single, total",
                f"bar >= {ATIS_BAR:.2f}",
            ),
            ratio_rows,
        ),
    )


def join_section(report: Report, args: argparse.Namespace, results: Results) -> None:
    keys = args.join_keys
    rows: list[tuple[str, ...]] = []
    numbers: dict[str, Any] = {}
    for case, description in JOIN_CASES.items():
        runs = results[f"join {case}"]
        ok = [r for r in runs if "failed" not in r]
        verdict = report.verdict(failures(runs) + [p for r in ok for p in r["problems"]])
        if not ok:
            rows.append((case, description, "failed", *["-"] * 7, verdict))
            numbers[case] = {"check": verdict}
            continue
        seconds, cpu = median(ok, "seconds"), median(ok, "cpu_s")
        kept, peak = median(ok, "rss_growth") / keys, median(ok, "peak_growth") / keys
        n = numbers[case] = {
            "keys": keys,
            "seconds": seconds,
            "cpu_s": cpu,
            "kept_bytes_per_key": kept,
            "peak_bytes_per_key": peak,
            "untrimmed_bytes_per_key": median(ok, "untrimmed_rss_growth") / keys,
            "first_minibatch_s": median(ok, "first_s"),
            "first_minibatch_peak_bytes_per_key": median(ok, "first_peak_growth") / keys,
            "check": verdict,
        }

        def bar(value: float, limit: float, case: str = case) -> str:
            return "-" if case == REFERENCE else "PASS" if value <= limit else "FAIL"

        rows.append(
            (
                case,
                description,
                f"{seconds:.3f}",
                f"{cpu:.3f}",
                bar(seconds, JOIN_BAR_S),
                f"{kept:.1f}",
                bar(kept, JOIN_BAR_BYTES),
                f"{peak:.1f}",
                bar(peak, JOIN_BAR_BYTES),
                f"{n['first_minibatch_s'] * 1e3:.1f}",
                verdict,
            )
        )
    report.numbers["join"] = numbers
    header = (
        "case",
        "primary + secondary",
        "build s",
        "CPU s",
        f"<= {JOIN_BAR_S:g} s",
        "kept B/key",
        f"<= {JOIN_BAR_BYTES:g}",
        "peak B/key",
        f"<= {JOIN_BAR_BYTES:g}",
        "first mb ms",
        "check",
    )
    report.section(
        f"## 2. Join build, {keys:,} keys (secondary shuffled): MinibatchSource([primary, secondary], "
        "randomize=False, max_sweeps=1) over indexed deserializers. kept = RSS growth after it (free heap pages "
        "trimmed), peak = VmHWM growth, both over the RSS before it; first mb = the first minibatch of "
        f"{JOIN_MINIBATCH} after it (parses chunks; no bar)",
        _table(header, rows),
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "one round, 1 sweep, 10^5 keys")
    ap.add_argument("--atis-sweeps", type=int, default=100, help="sweeps over ATIS train")
    ap.add_argument("--join-keys", type=int, default=10**6, help="sequences (keys) of each join case")
    ap.add_argument("--atis", default=str(REPO_ROOT.parent / "shared" / "datasets" / "atis" / "atis.train.ctf"))
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs, args.atis_sweeps, args.join_keys = 1, 1, 10**5
    if args.join_keys < JOIN_MINIBATCH:
        sys.exit(f"--join-keys must be at least {JOIN_MINIBATCH}")

    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    if not Path(args.atis).is_file():
        sys.exit(f"ATIS train not found: {args.atis} (use --atis)")
    t0 = time.perf_counter()
    split = split_atis(Path(args.atis), data)
    join_files = write_join_files(data, args.join_keys)
    print(f"data: {data} ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    timed, checks = jobs_of(args, split, join_files)
    rounds = Rounds(timed, checks, args.runs)
    results: Results = rounds.results
    report = Report()
    report.lines += [
        rounds.header("composite bars"),
        "# times are medians of the runs, each in a fresh process; CPU s = user + system",
        "",
    ]
    atis_section(report, args, split, results)
    join_section(report, args, results)
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
