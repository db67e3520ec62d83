#!/usr/bin/env python3
"""Core bars in one run: MinibatchSource throughput against the raw parse and CNTK, ATIS minibatch overhead,
frame-mode memory at scale, memory per sequence, and indexing time.

Every measurement runs in a fresh subprocess (imports untimed), round-robin over --runs rounds; the summary
shows medians. MB = 10^6 bytes of CTF text; CPU seconds are the process's user + system time (all threads).

  1. throughput  the kit's dense, sparse and seq files (gen.py, --mb MiB) read four ways:
                   raw         CTFDeserializer(chunk_size_in_bytes=file size + 1) + get_chunk(0): index + parse,
                               one thread
                   file order  MinibatchSource(randomize=False, max_sweeps=1), next_minibatch(1024) until {}
                   randomized  MinibatchSource(max_sweeps=1, randomization_seed=1), default window (128 chunks)
                   CNTK        the kit's ctf_oracle (CNTK's own C++ CTF reader, index + parse, one thread)
                 The MinibatchSource time includes building the deserializer (indexing) and every minibatch;
                 every configuration sums |values| of every stream, checked across configurations and against
                 the generator's .meta.json and the oracle.
  2. ATIS        atis.train.ctf (S0 943, S1 26, S2 129 sparse), randomized (seed 1), next_minibatch(64) for
                 --atis-sweeps sweeps: minibatches/s, samples/s, us per minibatch, and the overhead per
                 minibatch = (total - raw parse of the file * sweeps) / minibatches; the oracle in atis mode.
  3. frame mode  a plug-in Deserializer with --frames frames (sequences of 100 frames, 1000 chunks, dense
                 dim 1): MinibatchSource(frame_mode=True, randomization_window_in_chunks=4), the first
                 minibatch of 256; peak RSS (VmHWM) over the RSS after imports and the plug-in's arrays,
                 per sequence; then frames/s over 200 more minibatches of 256.
  4. memory      a CTF file of --mem-sequences one-line sequences (`i |a 1 |b 3:1`), 1 MiB chunks, randomized
                 with a window of 4 chunks (so the parsed window is small beside index + order + plan), 10
                 minibatches of 1024: (peak RSS - RSS after imports) per sequence, and the index's share.
  5. indexing    CTFDeserializer(...) on a file of --index-sequences such sequences, against reading the file
                 and counting its newlines (a lower bound of any scan): the work beyond the scan is at most
                 their difference.

Kit: $CNTKIO_SHARED_BENCH or ../shared/bench beside the repo root. Data: $BENCH_DATA or ./bench-data.
  python bench/core.py [--mb 200] [--runs 3] [--json out.json]
  python bench/core.py --smoke        # tiny sizes, one round: a sanity check in well under a minute
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
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
)
from ctf_parse import REPO_ROOT, _table, kit_dir, load_anchors
from harness import machine, parser, peak_rss, run_child

KINDS = ("dense", "sparse", "seq")
CONFIGS = ("raw", "file order", "randomized", "CNTK")
# kind -> [(name, CTF alias, dim, sparse)]
STREAMS: dict[str, list[tuple[str, str, int, bool]]] = {
    "dense": [("features", "features", 100, False), ("labels", "labels", 10, False)],
    "sparse": [("x", "x", 100000, True), ("y", "y", 1, False)],
    "seq": [("S0", "S0", 10000, True), ("S1", "S1", 10000, True)],
    "atis": [("S0", "S0", 943, True), ("S1", "S1", 26, True), ("S2", "S2", 129, True)],
    "short": [("a", "a", 1, False), ("b", "b", 10, True)],
}
RATIOS = (
    ("randomized / raw", "randomized", "raw"),
    ("randomized / CNTK", "randomized", "CNTK"),
    ("file order / raw", "file order", "raw"),
    ("file order / CNTK", "file order", "CNTK"),
    ("raw / CNTK", "raw", "CNTK"),
)
MINIBATCH = 1024
ATIS_MINIBATCH = 64
SEED = 1
FRAMES_PER_SEQUENCE = 100
FRAME_CHUNKS = 1000
FRAME_WINDOW = 4
FRAME_MINIBATCH = 256
FRAME_MINIBATCHES = 200
MEM_MINIBATCHES = 10
MEM_CHUNK_BYTES = 1 << 20  # small chunks and window: what remains per sequence is index + order + plan
MEM_WINDOW_CHUNKS = 4
INDEX_BAR_S = 0.3
SAME_SUM = 1e-9  # cntkio configurations: the same float32 values, summed in another order
CLOSE_SUM = 1e-6  # against exact decimals (meta) or CNTK's float parser (not correctly rounded)
PAGE = os.sysconf("SC_PAGE_SIZE")


# ------------------------------------------------------------------------------------------- children
def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss() -> int:
    """Current resident bytes of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def reset_peak_rss() -> None:
    """Restarts this process's peak-RSS mark (VmHWM) at its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def stream_defs(kind: str) -> Any:
    return StreamDefs(
        **{name: StreamDef(field=alias, shape=dim, is_sparse=sparse) for name, alias, dim, sparse in STREAMS[kind]}
    )


class Totals:
    """Count and sum(|v|) of the values a reader produced, per stream."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.abs_sum: dict[str, float] = {}

    def add(self, name: str, values: np.ndarray) -> None:
        self.count[name] = self.count.get(name, 0) + int(values.size)
        self.abs_sum[name] = self.abs_sum.get(name, 0.0) + float(np.abs(values).sum(dtype=np.float64))

    def result(self) -> dict[str, Any]:
        return {
            "count": sum(self.count.values()),
            "abs_sum": math.fsum(self.abs_sum.values()),
            "streams": {name: [self.count[name], self.abs_sum[name]] for name in self.count},
        }


def child_raw(spec: dict[str, Any]) -> dict[str, Any]:
    """Index + parse of the whole file as one chunk, one thread."""
    path, streams = spec["file"], stream_defs(spec["kind"])
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    deserializer = CTFDeserializer(path, streams, chunk_size_in_bytes=os.path.getsize(path) + 1)
    chunk = deserializer.get_chunk(0)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if deserializer.num_chunks() != 1:
        raise RuntimeError(f"expected one chunk, got {deserializer.num_chunks()}")
    totals = Totals()
    for name, data in chunk.items():
        totals.add(name, data.values)
    return {"seconds": seconds, "cpu_s": cpu, **totals.result()}


def read_source(source: Any, minibatch_size: int, totals: Totals) -> tuple[int, int]:
    """Reads the source to its end, summing every stream; returns (minibatches, samples)."""
    minibatches = samples = 0
    while minibatch := source.next_minibatch(minibatch_size):
        minibatches += 1
        samples += max(data.num_samples for data in minibatch.values())
        for info, data in minibatch.items():
            totals.add(info.name, data.values)
    return minibatches, samples


def child_source(spec: dict[str, Any]) -> dict[str, Any]:
    """MinibatchSource over the file; the timed region includes indexing and every minibatch."""
    totals = Totals()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    source = MinibatchSource(
        CTFDeserializer(spec["file"], stream_defs(spec["kind"])),
        randomize=spec["randomize"],
        randomization_seed=SEED,
        max_sweeps=spec["sweeps"],
    )
    minibatches, samples = read_source(source, spec["minibatch"], totals)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    source.close()
    return {"seconds": seconds, "cpu_s": cpu, "minibatches": minibatches, "samples": samples, **totals.result()}


class FrameData(Deserializer):
    """Synthetic plug-in: sequences of 100 frames, dim 1, integer keys, 1000 chunks; frame f of sequence k holds
    (k % 1000) * 100 + f. Keys and lengths are built once, as NumPy arrays; chunk_index returns slices of them."""

    def __init__(self, frames: int):
        self.sequences = max(1, frames // FRAMES_PER_SEQUENCE)
        self.chunks = min(FRAME_CHUNKS, self.sequences)
        self.starts = np.linspace(0, self.sequences, self.chunks + 1).astype(np.int64)
        self.keys = np.arange(self.sequences, dtype=np.int64)
        self.lengths = np.full(self.sequences, FRAMES_PER_SEQUENCE, dtype=np.int64)
        self.info = StreamInformation("x", 0, "dense", np.dtype(np.float32), (1,))

    def stream_infos(self) -> list[StreamInformation]:
        return [self.info]

    def num_chunks(self) -> int:
        return self.chunks

    def chunk_index(self, chunk_id: int) -> ChunkIndex:
        a, b = self.starts[chunk_id], self.starts[chunk_id + 1]
        return ChunkIndex(chunk_id, self.keys[a:b], self.lengths[a:b])

    def get_chunk(self, chunk_id: int) -> dict[str, DenseStream]:
        a, b = self.starts[chunk_id], self.starts[chunk_id + 1]
        base = (self.keys[a:b] % 1000).astype(np.float32) * FRAMES_PER_SEQUENCE
        values = (base[:, None] + np.arange(FRAMES_PER_SEQUENCE, dtype=np.float32)).reshape(-1, 1)
        offsets = np.arange(b - a + 1, dtype=np.int64) * FRAMES_PER_SEQUENCE
        return {"x": DenseStream(values, offsets)}


def child_frames(spec: dict[str, Any]) -> dict[str, Any]:
    """Frame mode over the synthetic plug-in: memory to the first minibatch, then randomized frames/s."""
    deserializer = FrameData(spec["frames"])
    base = rss()
    reset_peak_rss()
    t0 = time.perf_counter()
    source = MinibatchSource(deserializer, frame_mode=True, randomization_window_in_chunks=FRAME_WINDOW)
    first = source.next_minibatch(FRAME_MINIBATCH)
    first_s = time.perf_counter() - t0
    peak = peak_rss()
    problems = []
    x = first["x"]
    keys = [key for _, key in first.sequence_keys]
    expected = np.array([(k % 1000) * FRAMES_PER_SEQUENCE + frame for k, frame in keys], dtype=np.float32)
    if x.num_samples != FRAME_MINIBATCH or not np.array_equal(x.values.reshape(-1), expected):
        problems.append("first minibatch: frames do not match their keys")
    totals = Totals()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(FRAME_MINIBATCHES):
        totals.add("x", source.next_minibatch(FRAME_MINIBATCH)["x"].values)
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    source.close()
    frames = totals.count["x"]
    if frames != FRAME_MINIBATCH * FRAME_MINIBATCHES:
        problems.append(f"read {frames} frames, expected {FRAME_MINIBATCH * FRAME_MINIBATCHES}")
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "frames": frames,
        "abs_sum": totals.abs_sum["x"],
        "sequences": deserializer.sequences,
        "base_rss": base,
        "peak_growth": peak - base,
        "first_s": first_s,
        "problems": problems,
    }


def child_memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Randomized sequence mode over many short sequences: index and peak memory per sequence."""
    base = rss()
    reset_peak_rss()
    t0 = time.perf_counter()
    deserializer = CTFDeserializer(spec["file"], stream_defs("short"), chunk_size_in_bytes=MEM_CHUNK_BYTES)
    index_growth = rss() - base
    source = MinibatchSource(deserializer, randomization_seed=SEED, randomization_window_in_chunks=MEM_WINDOW_CHUNKS)
    totals = Totals()
    for _ in range(MEM_MINIBATCHES):
        minibatch = source.next_minibatch(MINIBATCH)
        for info, data in minibatch.items():
            totals.add(info.name, data.values)
    seconds = time.perf_counter() - t0
    peak = peak_rss()
    source.close()
    return {
        "seconds": seconds,
        "sequences": deserializer.sequence_index().num_sequences,
        "base_rss": base,
        "index_growth": index_growth,
        "peak_growth": peak - base,
        **totals.result(),
    }


def child_index(spec: dict[str, Any]) -> dict[str, Any]:
    """CTFDeserializer construction (the index) on the short-sequence file."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    deserializer = CTFDeserializer(spec["file"], stream_defs("short"))
    seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    return {"seconds": seconds, "cpu_s": cpu, "sequences": deserializer.sequence_index().num_sequences}


def child_scan(spec: dict[str, Any]) -> dict[str, Any]:
    """Reading the file and counting its newlines: a lower bound of any scan of it."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    with open(spec["file"], "rb") as f:
        lines = f.read().count(b"\n")
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_seconds() - cpu0, "lines": lines}


CHILDREN = {
    "raw": child_raw,
    "source": child_source,
    "frames": child_frames,
    "memory": child_memory,
    "index": child_index,
    "scan": child_scan,
}


# --------------------------------------------------------------------------------------------- parent
@dataclass(frozen=True)
class Job:
    label: str
    argv: list[str]
    oracle: bool = False


def child_job(label: str, child: str, **spec: Any) -> Job:
    return Job(label, [sys.executable, __file__, "--child", child, "--spec", json.dumps(spec)])


def oracle_job(label: str, oracle: Path, path: Path, kind: str) -> Job:
    return Job(label, [str(oracle), str(path), kind], oracle=True)


def run(job: Job) -> dict[str, Any]:
    done = subprocess.run(job.argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{job.label} failed (exit {done.returncode}): {' '.join(job.argv)}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if job.oracle:  # its `count` is the sparse values alone when there are any
        result["count"] = result["dense_values"] + result["nnz"]
    return result


def write_short_sequences(path: Path, sequences: int) -> None:
    """`i |a 1 |b 3:1`, one line per sequence, numeric ids 0..n-1 (written once)."""
    if path.exists():
        return
    line = " |a 1 |b 3:1\n"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for start in range(0, sequences, 1_000_000):
            ids = np.arange(start, min(start + 1_000_000, sequences)).astype(str)
            f.write(line.join(ids.tolist()) + line)
    tmp.rename(path)


def prepare(args: argparse.Namespace, kit: Path) -> dict[str, Any]:
    """Generates (once) every file; returns their paths and the kit's metadata."""
    anchors = load_anchors(kit)
    data = Path(args.data)
    files: dict[str, Any] = {"meta": {}}
    for kind in KINDS:
        meta = anchors.ensure_data(kind, args.mb, SEED, args.data, sys.executable)
        files["meta"][kind] = meta
        files[kind] = Path(meta["files"]["ctf"]["path"])
        print(f"data: {files[kind]}  {os.path.getsize(files[kind]) / 1e6:.1f} MB", file=sys.stderr)
    for name, count in (("memory", args.mem_sequences), ("index", args.index_sequences)):
        files[name] = data / f"short_{count}seq.ctf"
        write_short_sequences(files[name], count)
    files["atis"] = Path(args.atis)
    return files


def jobs_of(args: argparse.Namespace, files: dict[str, Any], oracle: Path) -> list[Job]:
    """Every measurement of one round, in the order they run."""
    jobs: list[Job] = []
    for kind in KINDS:
        path = str(files[kind])
        source = {"file": path, "kind": kind, "sweeps": 1, "minibatch": MINIBATCH}
        jobs += [
            child_job(f"{kind} raw", "raw", file=path, kind=kind),
            child_job(f"{kind} file order", "source", randomize=False, **source),
            child_job(f"{kind} randomized", "source", randomize=True, **source),
            oracle_job(f"{kind} CNTK", oracle, files[kind], kind),
        ]
    atis = {"file": str(files["atis"]), "kind": "atis"}
    atis_source = {"randomize": True, "sweeps": args.atis_sweeps, "minibatch": ATIS_MINIBATCH, **atis}
    return [
        *jobs,
        child_job("atis raw", "raw", **atis),
        child_job("atis randomized", "source", **atis_source),
        oracle_job("atis CNTK", oracle, files["atis"], "atis"),
        child_job("frames", "frames", frames=args.frames),
        child_job("memory", "memory", file=str(files["memory"])),
        child_job("index", "index", file=str(files["index"])),
        child_job("scan", "scan", file=str(files["index"])),
    ]


Results = dict[str, list[dict[str, Any]]]


def median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


class Report:
    """The summary text, its numbers (for --json) and whether every check passed."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.numbers: dict[str, Any] = {}
        self.ok = True

    def verdict(self, problems: list[str]) -> str:
        self.ok &= not problems
        return "ok" if not problems else "BAD(" + "; ".join(problems) + ")"

    def section(self, title: str, *tables: str) -> None:
        self.lines.append(title)
        for table in tables:
            self.lines += ["", table]
        self.lines.append("")

    def finish(
        self,
        args: argparse.Namespace,
        results: Any,
        numbers: dict[str, Any] | None = None,
        **extra: Any,
    ) -> int:
        """Ends the report with the checks line, prints it, writes ``--json`` (the options, ``extra`` entries, every
        run and the summary: the text and ``numbers``, by default :attr:`numbers`); the exit code."""
        self.lines.append("checks: " + ("all ok" if self.ok else "NOT OK (see the check columns)"))
        text = "\n".join(self.lines)
        print()
        print(text)
        if args.json:
            options = {k: v for k, v in vars(args).items() if k not in ("child", "spec")}
            summary = {"text": text, **(self.numbers if numbers is None else numbers)}
            document = {"args": options, "machine": machine(), **extra, "runs": results, "summary": summary}
            Path(args.json).write_text(json.dumps(document, indent=1))
        return 0 if self.ok else 1


def throughput_problems(kind: str, config: str, results: Results, meta: dict[str, Any]) -> list[str]:
    """Every run's count and sum(|v|) against cntkio raw (run 1), the generator's metadata and CNTK."""
    raw, cntk = results[f"{kind} raw"][0], results[f"{kind} CNTK"][0]
    references = [("raw", raw["count"], raw["abs_sum"]), ("CNTK", cntk["count"], cntk["abs_sum"])]
    if kind == "dense":
        references.append(("gen.py", meta["numbers"], meta["abs_sum_f64"]))
    elif kind == "sparse":
        references.append(("gen.py", meta["nnz"] + meta["rows"], meta["abs_sum_f64"]))
    problems = []
    for number, result in enumerate(results[f"{kind} {config}"], 1):
        for name, count, total in references:
            limit = SAME_SUM if name == "raw" and config != "CNTK" else CLOSE_SUM
            if result["count"] != count or relative(result["abs_sum"], total) > limit:
                problems.append(
                    f"run {number}: {result['count']} values, sum {result['abs_sum']:.10g}; "
                    f"{name}: {count}, {total:.10g}"
                )
    return problems


def throughput_section(report: Report, files: dict[str, Any], results: Results) -> None:
    rows: list[tuple[str, ...]] = []
    ratio_rows: list[tuple[str, ...]] = []
    numbers: dict[str, Any] = {}
    for kind in KINDS:
        size = os.path.getsize(files[kind]) / 1e6
        mbps = {}
        for config in CONFIGS:
            runs = results[f"{kind} {config}"]
            seconds, cpu = median(runs, "seconds"), median(runs, "cpu_s")
            mbps[config] = size / seconds
            check = report.verdict(throughput_problems(kind, config, results, files["meta"][kind]))
            numbers[f"{kind} {config}"] = {"mb": size, "seconds": seconds, "cpu_s": cpu, "mbps": mbps[config]}
            spread = f"{min(r['seconds'] for r in runs):.3f}-{max(r['seconds'] for r in runs):.3f}"
            speed = (f"{mbps[config]:.1f}", f"{seconds:.3f}", spread, f"{cpu:.3f}", f"{size / cpu:.1f}")
            # the oracle's own peak RSS is ru_maxrss, which starts at this process's peak: not shown
            peak = "-" if config == "CNTK" else f"{median(runs, 'peak_rss_mb'):.0f}"
            rows.append((kind, config, f"{size:.1f}", *speed, peak, check))
        for label, a, b in RATIOS:
            numbers[f"{kind} {label}"] = mbps[a] / mbps[b]
        ratio_rows.append((kind, *(f"{mbps[a] / mbps[b]:.2f}x" for _, a, b in RATIOS)))
    report.numbers["throughput"] = numbers
    header = ("file", "reader", "MB", "MB/s", "s", "s range", "CPU s", "MB/CPU-s", "peak RSS MiB", "check")
    report.section(
        f"## 1. Throughput, one sweep (MinibatchSource: minibatches of {MINIBATCH}, from the constructor on; "
        "raw and CNTK: index + parse, 1 thread)",
        _table(header, rows),
        _table(("file", *(label for label, _, _ in RATIOS)), ratio_rows),
    )


def atis_section(report: Report, args: argparse.Namespace, files: dict[str, Any], results: Results) -> None:
    size = os.path.getsize(files["atis"]) / 1e6
    source, raw, cntk = results["atis randomized"], results["atis raw"], results["atis CNTK"]
    total, raw_s, cntk_s = median(source, "seconds"), median(raw, "seconds"), median(cntk, "seconds")
    minibatches, samples, sweeps = source[0]["minibatches"], source[0]["samples"], args.atis_sweeps
    problems = [
        f"run {number}: {r['count']} values, sum {r['abs_sum']:.10g}, {r['samples']} samples; CNTK x {sweeps}: "
        f"{cntk[0]['count'] * sweeps}, {cntk[0]['abs_sum'] * sweeps:.10g}, {cntk[0]['samples'] * sweeps}"
        for number, r in enumerate(source, 1)
        if r["count"] != cntk[0]["count"] * sweeps
        or relative(r["abs_sum"], cntk[0]["abs_sum"] * sweeps) > CLOSE_SUM
        or r["samples"] != cntk[0]["samples"] * sweeps
    ]
    a = report.numbers["atis"] = {
        "sweeps": sweeps,
        "minibatches": minibatches,
        "samples": samples,
        "seconds": total,
        "cpu_s": median(source, "cpu_s"),
        "minibatches_per_s": minibatches / total,
        "samples_per_s": samples / total,
        "us_per_minibatch": total / minibatches * 1e6,
        "overhead_us_per_minibatch": (total - raw_s * sweeps) / minibatches * 1e6,
        "raw_seconds": raw_s,
        "raw_mbps": size / raw_s,
        "cntk_seconds": cntk_s,
        "cntk_cpu_s": median(cntk, "cpu_s"),
        "cntk_mbps": size / cntk_s,
        "check": report.verdict(problems),
    }
    rows = [
        ("minibatches / s", f"{a['minibatches_per_s']:,.0f}"),
        ("samples / s", f"{a['samples_per_s']:,.0f}"),
        ("us per minibatch", f"{a['us_per_minibatch']:.1f}"),
        ("overhead us per minibatch = (total - raw x sweeps) / minibatches", f"{a['overhead_us_per_minibatch']:.1f}"),
        ("total (constructor + every minibatch): s / CPU s", f"{total:.3f} / {a['cpu_s']:.3f}"),
        ("minibatches / samples read", f"{minibatches} / {samples}"),
        ("cntkio raw parse of the file (index + parse, 1 thread)", f"{raw_s * 1e3:.1f} ms = {size / raw_s:.0f} MB/s"),
        ("CNTK oracle, atis mode (index + parse, 1 thread)", f"{cntk_s * 1e3:.1f} ms = {size / cntk_s:.0f} MB/s"),
        ("CNTK oracle CPU", f"{a['cntk_cpu_s'] * 1e3:.1f} ms"),
        ("raw / CNTK", f"{cntk_s / raw_s:.2f}x"),
        (f"check: values, sum, samples = CNTK's x {sweeps}", a["check"]),
    ]
    report.section(
        f"## 2. ATIS train ({size:.2f} MB, {cntk[0]['sequences']} sequences, {cntk[0]['samples']} samples), "
        f"randomized (seed {SEED}), minibatches of {ATIS_MINIBATCH}, {sweeps} sweeps",
        _table(("measure", "value"), rows),
    )


def scale_section(report: Report, args: argparse.Namespace, files: dict[str, Any], results: Results) -> None:
    frames, memory, index, scan = (results[name] for name in ("frames", "memory", "index", "scan"))
    sequences = frames[0]["sequences"]
    f = report.numbers["frames"] = {
        "frames": sequences * FRAMES_PER_SEQUENCE,
        "sequences": sequences,
        "peak_growth_bytes": median(frames, "peak_growth"),
        "bytes_per_sequence": median(frames, "peak_growth") / sequences,
        "first_minibatch_s": median(frames, "first_s"),
        "frames_per_s": frames[0]["frames"] / median(frames, "seconds"),
        "cpu_s": median(frames, "cpu_s"),
        "check": report.verdict([problem for r in frames for problem in r["problems"]]),
    }
    expected = 2 * MINIBATCH * MEM_MINIBATCHES  # `|a 1 |b 3:1`: two values 1 per sequence
    m = report.numbers["memory"] = {
        "sequences": memory[0]["sequences"],
        "file_mb": os.path.getsize(files["memory"]) / 1e6,
        "peak_growth_bytes": median(memory, "peak_growth"),
        "bytes_per_sequence": median(memory, "peak_growth") / memory[0]["sequences"],
        "index_bytes_per_sequence": median(memory, "index_growth") / memory[0]["sequences"],
        "check": report.verdict(
            [
                f"run {number}: {r['sequences']} sequences, {r['count']} values, sum {r['abs_sum']}; expected "
                f"{args.mem_sequences}, {expected}, {expected}"
                for number, r in enumerate(memory, 1)
                if (r["sequences"], r["count"], r["abs_sum"]) != (args.mem_sequences, expected, expected)
            ]
        ),
    }
    index_s, scan_s = median(index, "seconds"), median(scan, "seconds")
    i = report.numbers["index"] = {
        "sequences": index[0]["sequences"],
        "file_mb": os.path.getsize(files["index"]) / 1e6,
        "constructor_s": index_s,
        "constructor_cpu_s": median(index, "cpu_s"),
        "s_per_million_sequences": index_s / index[0]["sequences"] * 1e6,
        "read_count_s": scan_s,
        "beyond_scan_at_most_s": index_s - scan_s,
        "check": report.verdict(
            []
            if index[0]["sequences"] == scan[0]["lines"] == args.index_sequences
            else [f"{index[0]['sequences']} sequences, {scan[0]['lines']} lines, expected {args.index_sequences}"]
        ),
    }
    beyond = i["beyond_scan_at_most_s"]
    bar = "PASS" if beyond <= INDEX_BAR_S else "not shown (the upper bound is above the bar)"
    rows = [
        (
            f"3. frame mode, {sequences:,} sequences x {FRAMES_PER_SEQUENCE} frames, {FRAME_CHUNKS} chunks, "
            f"window {FRAME_WINDOW}: peak RSS growth to the first minibatch of {FRAME_MINIBATCH}",
            f"{f['peak_growth_bytes'] / 2**20:.1f} MiB = {f['bytes_per_sequence']:.1f} B/sequence",
            f["check"],
        ),
        ("3. frame mode: time to the first minibatch (constructor included)", f"{f['first_minibatch_s']:.3f} s", "-"),
        (
            f"3. frame mode, randomized: {FRAME_MINIBATCHES} more minibatches of {FRAME_MINIBATCH}",
            f"{f['frames_per_s']:,.0f} frames/s (CPU {f['cpu_s']:.3f} s)",
            f["check"],
        ),
        (
            f"4. sequence mode, {m['sequences']:,} one-line sequences ({m['file_mb']:.0f} MB), 1 MiB chunks, "
            f"randomized (window {MEM_WINDOW_CHUNKS} chunks), {MEM_MINIBATCHES} minibatches of {MINIBATCH}: "
            "peak RSS growth",
            f"{m['peak_growth_bytes'] / 2**20:.1f} MiB = {m['bytes_per_sequence']:.1f} B/sequence",
            m["check"],
        ),
        (
            "4. of which the index (RSS growth after the constructor)",
            f"{m['index_bytes_per_sequence']:.1f} B/sequence",
            "-",
        ),
        (
            f"5. CTFDeserializer(...) on {i['sequences']:,} one-line sequences ({i['file_mb']:.0f} MB), numeric ids",
            f"{index_s:.3f} s (CPU {i['constructor_cpu_s']:.3f} s) = {i['s_per_million_sequences']:.3f} s / 10^6",
            i["check"],
        ),
        ("5. read() + count(b'\\n') of the same file: a lower bound of any scan", f"{scan_s:.3f} s", "-"),
        (f"5. work beyond the scan <= constructor - read/count (bar {INDEX_BAR_S} s)", f"{beyond:.3f} s: {bar}", "-"),
    ]
    report.section(
        "## 3-5. Frame mode at scale, memory per sequence, indexing", _table(("measure", "value", "check"), rows)
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "tiny sizes and one round")
    ap.add_argument("--mb", type=float, default=200.0, help="size of each kit CTF file in MiB (gen.py)")
    ap.add_argument("--atis-sweeps", type=int, default=20, help="sweeps over ATIS train")
    ap.add_argument("--frames", type=int, default=10**8, help="frames of the synthetic frame-mode plug-in")
    ap.add_argument("--mem-sequences", type=int, default=2 * 10**6, help="sequences of the memory file")
    ap.add_argument("--index-sequences", type=int, default=10**6, help="sequences of the indexing file")
    ap.add_argument("--atis", default=str(REPO_ROOT.parent / "shared" / "datasets" / "atis" / "atis.train.ctf"))
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.mb, args.runs, args.atis_sweeps = 2.0, 1, 2
        args.frames, args.mem_sequences, args.index_sequences = 10**6, 10**5, 10**5

    kit = kit_dir()
    oracle = kit / "cntk-ctf-oracle" / "ctf_oracle"
    if not os.access(oracle, os.X_OK):
        sys.exit(f"CNTK's CTF oracle not found or not executable: {oracle}")
    files = prepare(args, kit)
    jobs = jobs_of(args, files, oracle)
    load_before = os.getloadavg()[0]
    results: Results = {job.label: [] for job in jobs}
    for round_number in range(1, args.runs + 1):
        for job in jobs:
            print(f"round {round_number}/{args.runs}: {job.label}", file=sys.stderr)
            results[job.label].append(run(job))

    report = Report()
    report.lines += [
        f"# core bars  {time.strftime('%Y-%m-%d %H:%M')}  runs={args.runs}  nproc={os.cpu_count()}  "
        f"load avg (1 min) before/after: {load_before:.2f}/{os.getloadavg()[0]:.2f}",
        "# MB = 10^6 bytes of CTF text; times are medians of the runs, each in a fresh process; CPU s = user + system",
        "",
    ]
    throughput_section(report, files, results)
    atis_section(report, args, files, results)
    scale_section(report, args, files, results)
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
