#!/usr/bin/env python3
"""CBF bars: CBF decoded into NumPy against the CTF raw parse and np.load, MinibatchSource over CBF against CTF,
CTF -> CBF conversion against the raw parse, and a UserDeserializer of precomputed arrays against CBF.

Every measurement runs in a fresh subprocess (imports untimed), round-robin over --runs rounds; the summary
shows medians. CPU seconds are the child's user + system time (all threads). MB = 10^6 bytes, GB = 10^9 bytes.

Data: the kit's dense, sparse and seq CTF files (gen.py, --mb MiB; streams as in core.py's table), and each one
converted once to CBF with write_cbf(CTFDeserializer(ctf), <stem>.cbf) (default 32 MiB chunks; untimed, cached in
the data directory and written again when older than its CTF file or than cntkio's writer).

  1. CBF -> NumPy   file order, one sweep, one thread, each reader producing the whole data set as NumPy arrays:
                      CTF raw   CTFDeserializer(chunk_size_in_bytes=file size + 1) + get_chunk(0): index + parse
                                (core.py's raw)
                      CBF       CBFDeserializer(cbf) + get_chunk(c) for every chunk, the chunks kept
                      np.load   np.load of the same numbers as one float32 .npy (dense only: the kit's .npy when it
                                holds exactly the CBF's numbers, checked every run, else one written from the CBF's
                                decoded arrays, untimed): the memory-speed ceiling
                    GB/s of CBF file bytes (bar >= 1.5), CBF / CTF raw = raw s / CBF s on the same data (bar >= 5x),
                    CBF / np.load = np.load s / CBF s on the same numbers (no bar).
  2. randomized     MinibatchSource(d, randomization_seed=1, max_sweeps=1), default window, next_minibatch(1024)
                    until {}, from building d to the last minibatch, d = CTFDeserializer(ctf) or CBFDeserializer(cbf):
                    samples/s and MB/s of CTF text; CBF / CTF = CTF s / CBF s (bar >= 3x).
  3. conversion     write_cbf(CTFDeserializer(ctf), out) (its index included; default 32 MiB chunks) against the CTF
                    raw parse of the same file: raw s / conversion s (bar >= 0.70). The output must be byte-identical
                    to the cached CBF (checked untimed, then deleted).
  4. user           a UserDeserializer (cntkio.user, cntk.io 8.3: stream_infos, num_chunks, get_chunk) whose chunks
                    are the CBF file's decoded chunks converted once, before the timer, into what get_chunk returns:
                    sample mode (arrays (n, dim), CSR (n, dim)) when every sequence has one sample in every stream,
                    else the flat sequence form (DenseStream / SparseStream). MinibatchSource(that, randomize=False,
                    max_sweeps=1), next_minibatch(1024) until {}, from the MinibatchSource constructor (which reads
                    every chunk once for the index: CNTK's API has none) to the last minibatch, against the same over
                    CBFDeserializer(cbf) (from its constructor): user / CBF = CBF s / user s (bar >= 0.50).

Correctness, in every child, outside the timed region: per stream the samples, the stored values and sum(|v|)
(float64), and the sequences, of what the child read. The MinibatchSource children time a sweep that only counts
(minibatches, samples per stream, sequences), then sum a second, untimed sweep of a new source of the same
configuration, whose counts must match the timed sweep's. Every run must equal CTF raw (run 1): counts exactly,
sums within 1e-9 relative (the same float32 values summed in another order); the np.load run its value count,
rows and sum; and the generator's .meta.json where it has the numbers (dense: rows, values, sum; sparse: rows,
nnz + rows, sum; seq: sequences; sums within 1e-6: exact decimals against float32). A failed child is a failed
check; exits 1 when a check is not ok (a missed bar is reported, not an exit status).

Kit: $CNTKIO_SHARED_BENCH or ../shared/bench beside the repo root. Data: $BENCH_DATA or ./bench-data.
  python bench/cbf.py [--mb 200] [--runs 3] [--json out.json]
  python bench/cbf.py --smoke         # --mb 2, one round: a sanity check in well under a minute
"""

from __future__ import annotations

import argparse
import filecmp
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import cntkio._native
import cntkio._src.formats.cbf_writer as convert
from cntkio import (
    CBFDeserializer,
    CTFDeserializer,
    MinibatchSource,
    SparseStream,
    StreamInformation,
    UserDeserializer,
    write_cbf,
)
from core import KINDS, MINIBATCH, SEED, Report, Totals, cpu_seconds, median, relative, stream_defs
from ctf_parse import _table, kit_dir, load_anchors
from harness import Job, Rounds, parser, run, run_child

GBPS_BAR = 1.5  # CBF -> NumPy, GB/s of CBF file bytes
RAW_BAR = 5.0  # CBF -> NumPy / CTF raw parse
RANDOMIZED_BAR = 3.0  # MinibatchSource randomized, CBF / CTF
CONVERT_BAR = 0.70  # CTF -> CBF conversion / CTF raw parse
USER_BAR = 0.50  # UserDeserializer of precomputed arrays / CBF, file order
SAME_SUM = 1e-9  # the same float32 values, summed in another order
CLOSE_SUM = 1e-6  # against the generator's exact decimals
WRITER = (convert.__file__, cntkio._native.__file__)  # a cached CBF older than these is written again


# ------------------------------------------------------------------------------------------- children
class Sums(Totals):
    """Per stream: samples, stored values and sum(|v|); and the sequences read."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: dict[str, int] = {}
        self.sequences = 0

    def add_stream(self, name: str, values: np.ndarray, samples: int) -> None:
        self.add(name, values)
        self.samples[name] = self.samples.get(name, 0) + samples

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """A deserializer's chunk (DenseStream / SparseStream per stream)."""
        for name, data in chunk.items():
            if isinstance(data, SparseStream):
                values = data.values[int(data.indptr[0]) : int(data.indptr[-1])]
                self.add_stream(name, values, len(data.indptr) - 1)
            else:
                self.add_stream(name, data.values, int(data.seq_offsets[-1]))
        self.sequences += len(next(iter(chunk.values())).seq_offsets) - 1

    def add_minibatch(self, minibatch: Any) -> None:
        for info, data in minibatch.items():
            values = data.values
            if data.is_sparse:
                values = values[int(data.indptr[0]) : int(data.indptr[-1])]
            self.add_stream(info.name, values, data.num_samples)
        self.sequences += next(iter(minibatch.values())).num_sequences

    def result(self) -> dict[str, Any]:
        totals = super().result()
        streams = {name: [self.samples[name], *counts] for name, counts in totals["streams"].items()}
        return {**totals, "streams": streams, "sequences": self.sequences}


def timed(work: Any) -> tuple[Any, float, float]:
    """work()'s result, wall seconds and CPU seconds."""
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    result = work()
    return result, time.perf_counter() - t0, cpu_seconds() - cpu0


def child_raw(spec: dict[str, Any]) -> dict[str, Any]:
    """CTF index + parse of the whole file as one chunk, one thread (core.py's raw)."""
    path = spec["ctf"]

    def work() -> Any:
        deserializer = CTFDeserializer(path, stream_defs(spec["kind"]), chunk_size_in_bytes=os.path.getsize(path) + 1)
        return deserializer, deserializer.get_chunk(0)

    (deserializer, chunk), seconds, cpu = timed(work)
    if deserializer.num_chunks() != 1:
        raise RuntimeError(f"expected one chunk, got {deserializer.num_chunks()}")
    sums = Sums()
    sums.add_chunk(chunk)
    return {"seconds": seconds, "cpu_s": cpu, **sums.result()}


def child_cbf(spec: dict[str, Any]) -> dict[str, Any]:
    """CBFDeserializer + get_chunk of every chunk in file order, one thread, every chunk kept."""

    def work() -> list[Any]:
        deserializer = CBFDeserializer(spec["cbf"])
        return [deserializer.get_chunk(c) for c in range(deserializer.num_chunks())]

    chunks, seconds, cpu = timed(work)
    sums = Sums()
    for chunk in chunks:
        sums.add_chunk(chunk)
    return {"seconds": seconds, "cpu_s": cpu, "chunks": len(chunks), **sums.result()}


def child_npy(spec: dict[str, Any]) -> dict[str, Any]:
    """np.load of the .npy holding the same numbers."""
    array, seconds, cpu = timed(lambda: np.load(spec["npy"]))
    abs_sum = float(np.abs(array).sum(dtype=np.float64))
    return {"seconds": seconds, "cpu_s": cpu, "rows": int(array.shape[0]), "count": int(array.size), "abs_sum": abs_sum}


class Precomputed(UserDeserializer):
    """The CNTK way: stream_infos, num_chunks and get_chunk returning data prepared beforehand."""

    def __init__(self, infos: list[StreamInformation], chunks: list[dict[str, Any]]):
        self.infos = infos
        self.chunks = chunks

    def stream_infos(self) -> list[StreamInformation]:
        return self.infos

    def num_chunks(self) -> int:
        return len(self.chunks)

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        return self.chunks[chunk_id]


def user_form(data: Any, sample_mode: bool) -> Any:
    """A decoded stream as UserDeserializer.get_chunk returns it: an array / CSR of rows = sequences (sample mode),
    or the flat sequence form (DenseStream / SparseStream: every sample back to back plus sequence offsets). CNTK's
    list of one array per sequence also works but costs Python per sequence (about 4 us)."""
    if sample_mode:
        return data.csr() if isinstance(data, SparseStream) else data.values
    return data


def precomputed_user(cbf: str) -> tuple[Precomputed, bool]:
    """The CBF file's chunks in UserDeserializer form, and whether that is sample mode."""
    deserializer = CBFDeserializer(cbf)
    chunks = [deserializer.get_chunk(c) for c in range(deserializer.num_chunks())]
    sample_mode = all(np.all(np.diff(s.seq_offsets) == 1) for chunk in chunks for s in chunk.values())
    converted = [{name: user_form(data, sample_mode) for name, data in chunk.items()} for chunk in chunks]
    return Precomputed(deserializer.stream_infos(), converted), sample_mode


def source_of(spec: dict[str, Any], user: Precomputed | None) -> MinibatchSource:
    if spec["format"] == "ctf":
        deserializer: Any = CTFDeserializer(spec["ctf"], stream_defs(spec["kind"]))
    elif spec["format"] == "cbf":
        deserializer = CBFDeserializer(spec["cbf"])
    else:
        deserializer = user
    return MinibatchSource(deserializer, randomize=spec["randomize"], randomization_seed=SEED, max_sweeps=1)


def count_sweep(source: MinibatchSource) -> dict[str, Any]:
    """Reads the source to its end, counting only (minibatches, samples, samples per stream, sequences)."""
    minibatches = samples = sequences = 0
    per_stream: dict[str, int] = {}
    while minibatch := source.next_minibatch(MINIBATCH):
        minibatches += 1
        most = 0
        for info, data in minibatch.items():
            n = data.num_samples
            per_stream[info.name] = per_stream.get(info.name, 0) + n
            most = max(most, n)
        samples += most
        sequences += next(iter(minibatch.values())).num_sequences
    return {"minibatches": minibatches, "samples": samples, "stream_samples": per_stream, "sequences": sequences}


def child_source(spec: dict[str, Any]) -> dict[str, Any]:
    """MinibatchSource over CTF, CBF or the precomputed UserDeserializer: a timed sweep that counts, then an untimed
    sweep of a new source of the same configuration that sums every stream."""
    user, sample_mode, prep_s = None, None, 0.0
    if spec["format"] == "user":
        (user, sample_mode), prep_s, _ = timed(lambda: precomputed_user(spec["cbf"]))

    def work() -> dict[str, Any]:
        source = source_of(spec, user)
        counts = count_sweep(source)
        source.close()
        return counts

    counts, seconds, cpu = timed(work)
    sums = Sums()
    source = source_of(spec, user)
    check_minibatches = 0
    while minibatch := source.next_minibatch(MINIBATCH):
        check_minibatches += 1
        sums.add_minibatch(minibatch)
    source.close()
    result = sums.result()
    problems = []
    checked = {
        "minibatches": check_minibatches,
        "stream_samples": {name: streams[0] for name, streams in result["streams"].items()},
        "sequences": result["sequences"],
    }
    for key, value in checked.items():
        if counts[key] != value:
            problems.append(f"timed sweep: {key} {counts[key]}, checked sweep: {value}")
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        **counts,
        **result,
        "sample_mode": sample_mode,
        "prep_s": prep_s,
        "problems": problems,
    }


def child_convert(spec: dict[str, Any]) -> dict[str, Any]:
    """write_cbf(CTFDeserializer(ctf), out), the index included; then out is compared with the cached CBF."""
    out = Path(spec["out"])

    def work() -> Path:
        return write_cbf(CTFDeserializer(spec["ctf"], stream_defs(spec["kind"])), out, progress=False)

    _, seconds, cpu = timed(work)
    written = out.stat().st_size
    identical = filecmp.cmp(out, spec["cbf"], shallow=False)
    out.unlink()
    return {"seconds": seconds, "cpu_s": cpu, "bytes": written, "identical": identical}


def child_make_cbf(spec: dict[str, Any]) -> dict[str, Any]:
    """The cached CBF file of a kit CTF file (untimed preparation)."""
    write_cbf(CTFDeserializer(spec["ctf"], stream_defs(spec["kind"])), spec["cbf"], progress=False)
    return {"bytes": os.path.getsize(spec["cbf"])}


def child_make_npy(spec: dict[str, Any]) -> dict[str, Any]:
    """The .npy for np.load: the kit's when it holds exactly the CBF's numbers (its dense streams side by side,
    one row per sequence of one sample), else one written from the CBF's decoded arrays."""
    deserializer = CBFDeserializer(spec["cbf"])
    chunks = [deserializer.get_chunk(c) for c in range(deserializer.num_chunks())]
    names = [info.name for info in deserializer.stream_infos()]
    if any(isinstance(chunk[name], SparseStream) for chunk in chunks for name in names):
        raise RuntimeError(f"{spec['cbf']}: a sparse stream has no .npy equivalent")
    columns = [np.concatenate([chunk[name].values for chunk in chunks]) for name in names]
    numbers = np.hstack([c.reshape(len(c), -1) for c in columns])
    kit = np.load(spec["kit_npy"])
    if kit.shape == numbers.shape and kit.dtype == numbers.dtype and np.array_equal(kit, numbers):
        return {"npy": spec["kit_npy"], "why": "the kit's .npy holds exactly the CBF's numbers"}
    differing = int(np.count_nonzero(kit != numbers)) if kit.shape == numbers.shape else -1
    np.save(spec["own_npy"], numbers)
    why = (
        f"the kit's .npy differs from the CBF's numbers in {differing} values"
        if differing >= 0
        else f"the kit's .npy is {kit.shape}, the CBF's numbers {numbers.shape}"
    )
    return {"npy": spec["own_npy"], "why": why + "; written from the CBF's decoded arrays"}


CHILDREN = {
    "raw": child_raw,
    "cbf": child_cbf,
    "npy": child_npy,
    "source": child_source,
    "convert": child_convert,
    "make-cbf": child_make_cbf,
    "make-npy": child_make_npy,
}


# --------------------------------------------------------------------------------------------- parent
def prepare(args: argparse.Namespace, kit: Path) -> dict[str, dict[str, Any]]:
    """Per kind: the kit's CTF file and metadata (generated once), its CBF (written once) and, where the kit has a
    .npy, the .npy holding the CBF's numbers."""
    anchors = load_anchors(kit)
    files: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        meta = anchors.ensure_data(kind, args.mb, SEED, args.data, sys.executable)
        ctf = Path(meta["files"]["ctf"]["path"])
        cbf = ctf.with_suffix(".cbf")
        entry: dict[str, Any] = {"meta": meta, "ctf": str(ctf), "cbf": str(cbf)}
        if not cbf.exists() or cbf.stat().st_mtime < max(Path(p).stat().st_mtime for p in (ctf, *WRITER)):
            print(f"data: writing {cbf} ...", file=sys.stderr)
            made = run(Job(f"{kind} make CBF", "make-cbf", {"kind": kind, "ctf": str(ctf), "cbf": str(cbf)}))
            if "failed" in made:
                sys.exit(f"could not write {cbf}: {made['failed']}")
        if "npy" in meta["files"]:
            spec = {"cbf": str(cbf), "kit_npy": meta["files"]["npy"]["path"], "own_npy": str(cbf) + ".npy"}
            made = run(Job(f"{kind} make .npy", "make-npy", spec))
            if "failed" in made:
                sys.exit(f"could not prepare the .npy of {cbf}: {made['failed']}")
            entry["npy"], entry["npy_why"] = made["npy"], made["why"]
        for name in ("ctf", "cbf", "npy"):
            if name in entry:
                entry[f"{name}_mb"] = os.path.getsize(entry[name]) / 1e6
        print(f"data: {ctf} {entry['ctf_mb']:.1f} MB -> {cbf.name} {entry['cbf_mb']:.1f} MB", file=sys.stderr)
        files[kind] = entry
    return files


def jobs_of(files: dict[str, dict[str, Any]]) -> list[Job]:
    """Every measurement of one round, in the order they run."""
    jobs: list[Job] = []
    for kind in KINDS:
        f = files[kind]
        base = {"kind": kind, "ctf": f["ctf"], "cbf": f["cbf"]}
        jobs += [
            Job(f"{kind} CTF raw", "raw", base),
            Job(f"{kind} CBF chunks", "cbf", base),
            *([Job(f"{kind} np.load", "npy", {"npy": f["npy"]})] if "npy" in f else []),
            Job(f"{kind} CTF randomized", "source", {**base, "format": "ctf", "randomize": True}),
            Job(f"{kind} CBF randomized", "source", {**base, "format": "cbf", "randomize": True}),
            Job(f"{kind} convert", "convert", {**base, "out": f["cbf"] + ".convert.cbf"}),
            Job(f"{kind} CBF file order", "source", {**base, "format": "cbf", "randomize": False}),
            Job(f"{kind} user file order", "source", {**base, "format": "user", "randomize": False}),
        ]
    return jobs


Results = dict[str, list[dict[str, Any]]]


def failures(runs: list[dict[str, Any]]) -> list[str]:
    return [f"run {number}: {r['failed']}" for number, r in enumerate(runs, 1) if "failed" in r]


def meta_problems(result: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """A reader's totals against the generator's metadata, where it has the numbers."""
    kind, problems = meta["kind"], []
    if kind in ("dense", "sparse"):
        values = meta["numbers"] if kind == "dense" else meta["nnz"] + meta["rows"]
        if result["count"] != values or relative(result["abs_sum"], meta["abs_sum_f64"]) > CLOSE_SUM:
            problems.append(
                f"{result['count']} values, sum {result['abs_sum']:.10g}; gen.py: {values}, {meta['abs_sum_f64']:.10g}"
            )
        samples = {name: s[0] for name, s in result["streams"].items()}
        if result["sequences"] != meta["rows"] or any(n != meta["rows"] for n in samples.values()):
            problems.append(f"{result['sequences']} sequences, samples {samples}; gen.py: {meta['rows']} rows")
    elif result["sequences"] != meta["sequences"]:
        problems.append(f"{result['sequences']} sequences; gen.py: {meta['sequences']}")
    return problems


def same_streams(result: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """Per stream samples and values exactly, sums within SAME_SUM, and sequences, against the reference."""
    a, b = result["streams"], reference["streams"]
    differ = (
        sorted(a) != sorted(b)
        or result["sequences"] != reference["sequences"]
        or any(a[name][:2] != b[name][:2] or relative(a[name][2], b[name][2]) > SAME_SUM for name in b)
    )
    if not differ:
        return []
    return [f"streams {a}, {result['sequences']} sequences; CTF raw: {b}, {reference['sequences']}"]


def run_problems(config: str, runs: list[dict[str, Any]], reference: dict[str, Any] | None, f: dict[str, Any]) -> str:
    """Every run of a configuration checked (see the module doc); '' when all are ok."""
    problems = failures(runs)
    for number, r in enumerate(runs, 1):
        if "failed" in r:
            continue
        found: list[str] = list(r.get("problems", []))
        if config == "np.load":
            if reference is not None:
                rows = {s[0] for s in reference["streams"].values()}
                if (
                    r["count"] != reference["count"]
                    or relative(r["abs_sum"], reference["abs_sum"]) > SAME_SUM
                    or rows != {r["rows"]}
                ):
                    found.append(
                        f"{r['rows']} rows, {r['count']} values, sum {r['abs_sum']:.12g}; CTF raw: samples {rows}, "
                        f"{reference['count']} values, sum {reference['abs_sum']:.12g}"
                    )
        elif config == "convert":
            if not r["identical"]:
                found.append(f"the output ({r['bytes']} bytes) differs from the cached {Path(f['cbf']).name}")
        else:
            found += meta_problems(r, f["meta"])
            if reference is not None and reference is not r:
                found += same_streams(r, reference)
        problems += [f"run {number}: {p}" for p in found]
    return "; ".join(problems)


Cells = Any  # (a run or None, median seconds or None) -> the row's measure-specific cells


class Summary:
    """The report plus the medians of every configuration and the bars."""

    def __init__(self, files: dict[str, dict[str, Any]], results: Results):
        self.files, self.results = files, results
        self.report = Report()
        self.numbers: dict[str, Any] = {}
        self.bars: list[tuple[str, ...]] = []
        self.verdicts: dict[str, str] = {}
        for kind in KINDS:
            raw = [r for r in results[f"{kind} CTF raw"] if "failed" not in r]
            reference = raw[0] if raw else None
            for label, runs in results.items():
                if label.startswith(kind + " "):
                    config = label[len(kind) + 1 :]
                    problems = run_problems(config, runs, reference, files[kind])
                    if reference is None and config != "CTF raw" and not problems:
                        problems = "no CTF raw run to compare with"
                    self.verdicts[label] = self.report.verdict([problems] if problems else [])

    def seconds(self, label: str) -> float | None:
        ok = [r for r in self.results.get(label, []) if "failed" not in r]
        return median(ok, "seconds") if ok else None

    def row(self, kind: str, config: str, mb: float, extra: Cells) -> tuple[str, ...]:
        """kind, reader, s, s range, CPU s, then extra(run, median seconds) (see Cells), peak RSS, check."""
        label = f"{kind} {config}"
        ok = [r for r in self.results[label] if "failed" not in r]
        if not ok:
            return (kind, config, "failed", "-", "-", *["-"] * len(extra(None, None)), "-", self.verdicts[label])
        seconds, cpu = median(ok, "seconds"), median(ok, "cpu_s")
        self.numbers[label] = {"mb": mb, "seconds": seconds, "cpu_s": cpu, "peak_rss_mb": median(ok, "peak_rss_mb")}
        spread = f"{min(r['seconds'] for r in ok):.3f}-{max(r['seconds'] for r in ok):.3f}"
        cells = extra(ok[0], seconds)
        return (
            kind,
            config,
            f"{seconds:.3f}",
            spread,
            f"{cpu:.3f}",
            *cells,
            f"{median(ok, 'peak_rss_mb'):.0f}",
            self.verdicts[label],
        )

    def ratio(self, name: str, kind: str, slower: str, faster: str, bar: float | None) -> tuple[str, str]:
        """(ratio text, verdict): time of `slower` over time of `faster` (throughput of faster / slower's)."""
        a, b = self.seconds(f"{kind} {slower}"), self.seconds(f"{kind} {faster}")
        if a is None or b is None:
            self.numbers[f"{kind} {name}"] = None
            if bar is not None:
                self.bars.append((name, kind, "failed", f">= {bar:g}", "FAIL"))
            return "failed", "FAIL" if bar is not None else "-"
        value = a / b
        self.numbers[f"{kind} {name}"] = value
        if bar is None:
            return f"{value:.2f}x", "-"
        verdict = "PASS" if value >= bar else "FAIL"
        self.bars.append((name, kind, f"{value:.2f}x", f">= {bar:g}x", verdict))
        return f"{value:.2f}x", verdict


def file_cells(mb: float, ctf_mb: float) -> Cells:
    """file MB, GB/s of that file, MB/s of the CTF text of the same data."""

    def cells(run: dict[str, Any] | None, seconds: float | None) -> list[str]:
        if run is None or seconds is None:
            return ["-"] * 3
        return [f"{mb:.1f}", f"{mb / 1e3 / seconds:.2f}", f"{ctf_mb / seconds:.0f}"]

    return cells


def convert_cells(ctf_mb: float, written_mb: float | None) -> Cells:
    """MB/s of CTF text, CBF MB written (the conversion only)."""

    def cells(run: dict[str, Any] | None, seconds: float | None) -> list[str]:
        if run is None or seconds is None:
            return ["-"] * 2
        return [f"{ctf_mb / seconds:.0f}", "-" if written_mb is None else f"{written_mb:.1f}"]

    return cells


def source_cells(ctf_mb: float, user: bool = False) -> Cells:
    """(user mode, untimed preparation,) minibatches, samples, samples/s, MB/s of CTF text."""

    def cells(run: dict[str, Any] | None, seconds: float | None) -> list[str]:
        if run is None or seconds is None:
            return ["-"] * (6 if user else 4)
        speed = [
            str(run["minibatches"]),
            f"{run['samples']:,}",
            f"{run['samples'] / seconds:,.0f}",
            f"{ctf_mb / seconds:.0f}",
        ]
        if not user:
            return speed
        if run["sample_mode"] is None:
            return ["-", "-", *speed]
        return ["sample" if run["sample_mode"] else "sequence", f"{run['prep_s']:.1f}", *speed]

    return cells


def numpy_section(s: Summary) -> None:
    rows, ratio_rows = [], []
    for kind in KINDS:
        f = s.files[kind]
        ctf_mb, cbf_mb = f["ctf_mb"], f["cbf_mb"]
        for config, mb in (("CTF raw", ctf_mb), ("CBF chunks", cbf_mb), ("np.load", f.get("npy_mb"))):
            if f"{kind} {config}" in s.results:
                rows.append(s.row(kind, config, mb, file_cells(mb, ctf_mb)))
        cbf_s = s.seconds(f"{kind} CBF chunks")
        gbps = cbf_mb / 1e3 / cbf_s if cbf_s else None
        if gbps is None:
            gbps_text, gbps_verdict = "failed", "FAIL"
        else:
            gbps_text, gbps_verdict = f"{gbps:.2f}", "PASS" if gbps >= GBPS_BAR else "FAIL"
        s.numbers[f"{kind} CBF GB/s"] = gbps
        s.bars.append(("CBF -> NumPy GB/s", kind, gbps_text, f">= {GBPS_BAR:g}", gbps_verdict))
        raw_ratio = s.ratio("CBF -> NumPy / CTF raw", kind, "CTF raw", "CBF chunks", RAW_BAR)
        npy = s.ratio("CBF -> NumPy / np.load", kind, "np.load", "CBF chunks", None) if "npy" in f else ("-", "-")
        ratio_rows.append((kind, f"{cbf_mb:.1f}", gbps_text, gbps_verdict, *raw_ratio, npy[0]))
    header = ("file", "reader", "s", "s range", "CPU s", "file MB", "GB/s of file", "MB/s of CTF text", "peak MiB")
    s.report.section(
        "## 1. CBF -> NumPy, file order, one sweep, one thread: CTF raw = CTFDeserializer(one chunk) + get_chunk(0); "
        "CBF chunks = CBFDeserializer + get_chunk(c) of every chunk (kept); np.load of the same numbers (.npy)",
        _table((*header, "check"), rows),
        _table(
            (
                "file",
                "CBF MB",
                "CBF GB/s",
                f"bar >= {GBPS_BAR:g}",
                "CBF / CTF raw",
                f"bar >= {RAW_BAR:g}x",
                "CBF / np.load (no bar)",
            ),
            ratio_rows,
        ),
    )
    s.report.lines[-1:-1] = [
        f"{kind}: np.load reads {Path(f['npy']).name}: {f['npy_why']}" for kind, f in s.files.items() if "npy" in f
    ]


def randomized_section(s: Summary) -> None:
    rows, ratio_rows = [], []
    for kind in KINDS:
        ctf_mb = s.files[kind]["ctf_mb"]
        for config in ("CTF randomized", "CBF randomized"):
            rows.append(s.row(kind, config, ctf_mb, source_cells(ctf_mb)))
        ratio = s.ratio("randomized CBF / CTF", kind, "CTF randomized", "CBF randomized", RANDOMIZED_BAR)
        ratio_rows.append((kind, *ratio))
    header = ("file", "reader", "s", "s range", "CPU s", "minibatches", "samples", "samples/s", "MB/s of CTF text")
    s.report.section(
        f"## 2. MinibatchSource randomized (seed {SEED}, default window), next_minibatch({MINIBATCH}) until {{}}, "
        "one sweep, from building the deserializer to the last minibatch",
        _table((*header, "peak MiB", "check"), rows),
        _table(("file", "CBF / CTF", f"bar >= {RANDOMIZED_BAR:g}x"), ratio_rows),
    )


def convert_section(s: Summary) -> None:
    rows, ratio_rows = [], []
    for kind in KINDS:
        ctf_mb, cbf_mb = s.files[kind]["ctf_mb"], s.files[kind]["cbf_mb"]
        rows.append(s.row(kind, "CTF raw", ctf_mb, convert_cells(ctf_mb, None)))
        rows.append(s.row(kind, "convert", ctf_mb, convert_cells(ctf_mb, cbf_mb)))
        ratio_rows.append((kind, *s.ratio("convert / CTF raw", kind, "CTF raw", "convert", CONVERT_BAR)))
    header = ("file", "reader", "s", "s range", "CPU s", "MB/s of CTF text", "CBF MB written", "peak MiB", "check")
    s.report.section(
        "## 3. CTF -> CBF: write_cbf(CTFDeserializer(ctf), out), index included, 32 MiB chunks (output compared "
        "byte for byte with the cached CBF), against the CTF raw parse (index + parse, one thread)",
        _table(header, rows),
        _table(("file", "convert / CTF raw", f"bar >= {CONVERT_BAR:g}"), ratio_rows),
    )


def user_section(s: Summary) -> None:
    rows, ratio_rows = [], []
    for kind in KINDS:
        ctf_mb = s.files[kind]["ctf_mb"]
        for config in ("CBF file order", "user file order"):
            rows.append(s.row(kind, config, ctf_mb, source_cells(ctf_mb, user=True)))
        ratio_rows.append((kind, *s.ratio("user / CBF", kind, "CBF file order", "user file order", USER_BAR)))
    header = ("file", "reader", "s", "s range", "CPU s", "user mode", "prep s (untimed)", "minibatches", "samples")
    s.report.section(
        f"## 4. UserDeserializer of precomputed chunks (the CBF's, converted before the timer) against CBF: "
        f"MinibatchSource(d, randomize=False, max_sweeps=1), next_minibatch({MINIBATCH}) until {{}}, from the "
        "constructor (the user's includes its index pass over every chunk) to the last minibatch",
        _table((*header, "samples/s", "MB/s of CTF text", "peak MiB", "check"), rows),
        _table(("file", "user / CBF", f"bar >= {USER_BAR:g}"), ratio_rows),
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "--mb 2 and one round")
    ap.add_argument("--mb", type=float, default=200.0, help="size of each kit CTF file in MiB (gen.py)")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.mb, args.runs = 2.0, 1

    t0 = time.perf_counter()
    files = prepare(args, kit_dir())
    print(f"data: ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    jobs = jobs_of(files)
    rounds = Rounds(jobs, [], args.runs)
    results: Results = rounds.results
    summary = Summary(files, results)
    report = summary.report
    report.lines += [
        rounds.header("CBF bars"),
        "# times are medians of the runs, each in a fresh process; CPU s = user + system; MB = 10^6 bytes, "
        "GB = 10^9 bytes; a ratio A / B = B's seconds / A's on the same data (A's throughput over B's)",
        "",
    ]
    numpy_section(summary)
    randomized_section(summary)
    convert_section(summary)
    user_section(summary)
    report.section("## Bars", _table(("bar", "file", "value", "target", "verdict"), summary.bars))
    return report.finish(args, results, {"files": files, "medians": summary.numbers, "bars": summary.bars})


if __name__ == "__main__":
    sys.exit(main())
