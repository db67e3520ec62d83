#!/usr/bin/env python3
"""Index bars (issue 11): indexing speed on every core against CNTK's indexer and a plain newline scan, opening a
~2 GB CTF file again with ``cache_index=True`` against the first open, and the time to the first minibatch, cold and
warm.

Files (made once in --data by concatenating the kit's files, all in the page cache once read): dense (the 320 MB
dense file x 6), sparse (the 200 MB sparse file x 10), seq (the 200 MB seq file x 10, explicit sequence ids).

Every measurement runs in a fresh subprocess, round-robin over --runs rounds; medians are shown.

  index (no cache)        CTFDeserializer(file, streams): the full scan, as without a cache, on every core
                          (bar: >= 4 GB/s)
  CNTK index              the kit's ctf_oracle (CNTK's own C++ CTF reader, one thread): its index_s (it parses
                          the file afterwards, not timed)
  newline scan            `wc -l file` (coreutils, one thread): a lower bound of any one-thread scan
  first open (writes it)  the same with cache_index=True and no cache file: scan + writing the cache
  second open (cache)     cache_index=True with the cache of the first open (bar: >= 20x faster than "index")
  first minibatch, cold   building the deserializer without a cache + MinibatchSource(randomization window 128
                          chunks).next_minibatch(64) (bar: <= index time + one chunk)
  first minibatch, warm   the same from the cache (bar: <= 0.2 s)

Checks: the warm index equals the cold one (sequence count, chunk count, key and length checksums), and a cache
with one byte flipped is detected (a warning) and rebuilt.

  python bench/index_cache.py [--runs 3] [--json out.json]
  python bench/index_cache.py --smoke      # 20 MB files, one round
"""

from __future__ import annotations

import glob
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from cntkio import CTFDeserializer, MinibatchSource
from core import Report, cpu_seconds, stream_defs
from ctf_parse import _table, kit_dir
from harness import Job, Rounds, parser, repeated_file, run_child

COPIES = {"dense": ("dense_320mb_s1.ctf", 6), "sparse": ("sparse_200mb_s1.ctf", 10), "seq": ("seq_200mb_s1.ctf", 10)}
SMOKE = {"dense": ("dense_2mb_s1.ctf", 10), "sparse": ("sparse_2mb_s1.ctf", 10), "seq": ("seq_2mb_s1.ctf", 10)}


def drop_caches(path: str) -> None:
    for cache in glob.glob(path + ".*.cntkio-index"):
        os.unlink(cache)


def open_timed(spec: dict[str, Any], cache: bool) -> tuple[CTFDeserializer, float, float]:
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    deserializer = CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=cache, max_errors=10**9)
    return deserializer, time.perf_counter() - t0, cpu_seconds() - cpu0


def summary(deserializer: CTFDeserializer) -> dict[str, Any]:
    index = deserializer.sequence_index()
    keys = index.keys.take(np.arange(min(len(index.keys), 10_000)))
    return {
        "sequences": index.num_sequences,
        "chunks": deserializer.num_chunks(),
        "lengths_sum": int(index.lengths.sum()),
        "keys_head": zlib.crc32(repr(keys).encode()),
    }


def child_open(spec: dict[str, Any]) -> dict[str, Any]:
    """One open: "plain" (no cache option), "first" (cache option, no cache file) or "warm" (cache file there)."""
    if spec["mode"] == "first":
        drop_caches(spec["file"])
    elif spec["mode"] == "warm" and not glob.glob(spec["file"] + ".*.cntkio-index"):
        CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=True, max_errors=10**9)
    deserializer, seconds, cpu = open_timed(spec, spec["mode"] != "plain")
    return {"seconds": seconds, "cpu_s": cpu, **summary(deserializer)}


def child_first_minibatch(spec: dict[str, Any]) -> dict[str, Any]:
    cache = spec["mode"] == "warm"
    if cache and not glob.glob(spec["file"] + ".*.cntkio-index"):
        CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=True, max_errors=10**9)
    t0 = time.perf_counter()
    deserializer, index_seconds, _ = open_timed(spec, cache)
    source = MinibatchSource(deserializer, randomization_window_in_chunks=128, randomization_seed=1)
    minibatch = source.next_minibatch(64)
    seconds = time.perf_counter() - t0
    source.close()
    return {"seconds": seconds, "index_seconds": index_seconds, "sequences": len(minibatch.sequence_keys)}


def child_corrupt(spec: dict[str, Any]) -> dict[str, Any]:
    """A cache with one byte flipped: detected (a warning) and rebuilt (then valid again)."""
    CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=True, max_errors=10**9)
    (cache,) = glob.glob(spec["file"] + ".*.cntkio-index")
    with open(cache, "r+b") as f:
        f.seek(os.path.getsize(cache) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("cntkio").addHandler(handler)
    rebuilt = CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=True, max_errors=10**9)
    detected = any("index cache" in w and "corrupt" in w for w in warnings)
    warnings.clear()
    CTFDeserializer(spec["file"], stream_defs(spec["kind"]), cache_index=True, max_errors=10**9)
    return {"detected": detected, "valid_after": not any("index cache" in w for w in warnings), **summary(rebuilt)}


def child_anchor(spec: dict[str, Any]) -> dict[str, Any]:
    """A program timed from outside (wall and CPU seconds of the child); the oracle's own index time when it is one."""
    t0 = time.perf_counter()
    done = subprocess.run(spec["argv"], capture_output=True, text=True, check=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {"seconds": time.perf_counter() - t0, "cpu_s": usage.ru_utime + usage.ru_stime}
    if spec.get("oracle"):
        oracle = json.loads(done.stdout.strip().splitlines()[-1])
        result |= {"seconds": oracle["index_s"], "sequences": oracle["sequences"]}
    return result


CHILDREN = {
    "anchor": child_anchor,
    "open": child_open,
    "first_minibatch": child_first_minibatch,
    "corrupt": child_corrupt,
}


def make_files(data: Path, smoke: bool) -> dict[str, str]:
    return {
        kind: str(repeated_file(data / name, copies, data / f"{kind}_{'smoke' if smoke else '2gb'}_x{copies}.ctf"))
        for kind, (name, copies) in (SMOKE if smoke else COPIES).items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, CHILDREN, "20 MB files, one round")
    args = ap.parse_args(argv)
    if run_child(args, CHILDREN):
        return 0
    if args.smoke:
        args.runs = 1
    files = make_files(Path(args.data), args.smoke)
    oracle = str(kit_dir() / "cntk-ctf-oracle" / "ctf_oracle")
    timed, checks = [], []
    for kind, path in files.items():
        base = {"file": path, "kind": kind}
        timed.append(Job(f"{kind}: CNTK index", "anchor", {"argv": [oracle, path, kind], "oracle": True}))
        timed.append(Job(f"{kind}: newline scan", "anchor", {"argv": ["wc", "-l", path]}))
        for mode, label in (
            ("plain", "index (no cache)"),
            ("first", "first open (writes it)"),
            ("warm", "second open"),
        ):
            timed.append(Job(f"{kind}: {label}", "open", {**base, "mode": mode}))
        for mode in ("cold", "warm"):
            timed.append(Job(f"{kind}: first minibatch, {mode}", "first_minibatch", {**base, "mode": mode}))
        checks.append(Job(f"{kind}: corrupt cache", "corrupt", base))
    rounds = Rounds(timed, checks, args.runs)
    results = rounds.results
    report = Report()
    rows, index_rows = [], []
    for kind, path in files.items():
        size = os.path.getsize(path)

        def median(label: str, key: str = "seconds", kind: str = kind) -> float:
            return statistics.median(r.get(key, float("nan")) for r in results[f"{kind}: {label}"])

        plain, first, warm = median("index (no cache)"), median("first open (writes it)"), median("second open")
        cntk, newlines = median("CNTK index"), median("newline scan")
        index_rows.append([
            kind, f"{size / 1e9:.2f} GB", f"{plain:.3f}", f"{median('index (no cache)', 'cpu_s'):.3f}",
            f"{size / plain / 1e9:.2f}", "PASS" if size / plain >= 4e9 else "FAIL", f"{size / cntk / 1e9:.2f}",
            f"{cntk / plain:.2f}x", f"{size / newlines / 1e9:.2f}", f"{newlines / plain:.2f}x",
        ])  # fmt: skip
        cold_mb, warm_mb = median("first minibatch, cold"), median("first minibatch, warm")
        cold_chunk = cold_mb - median("first minibatch, cold", "index_seconds")
        same = results[f"{kind}: second open"][-1] | {"seconds": 0, "cpu_s": 0, "peak_rss_mb": 0} == (
            results[f"{kind}: index (no cache)"][-1] | {"seconds": 0, "cpu_s": 0, "peak_rss_mb": 0}
        )
        corrupt = results[f"{kind}: corrupt cache"][-1]
        problems = [] if same else ["warm index differs"]
        if not (corrupt.get("detected") and corrupt.get("valid_after")):
            problems.append("corrupt cache not detected/rebuilt")
        rows.append([
            kind, f"{size / 1e9:.2f} GB", f"{plain:.3f}", f"{size / plain / 1e9:.2f}", f"{first:.3f}", f"{warm:.4f}",
            f"{plain / warm:.1f}x", "PASS" if plain / warm >= 20 else "FAIL", f"{cold_mb:.3f}",
            "PASS" if cold_mb <= plain + cold_chunk + 0.05 else "FAIL", f"{warm_mb:.3f}",
            "PASS" if warm_mb <= 0.2 else "FAIL", report.verdict(problems),
        ])  # fmt: skip
        report.numbers[kind] = {"index_s": plain, "cntk_index_s": cntk, "newline_scan_s": newlines,
                                "first_open_s": first, "warm_s": warm, "ratio": plain / warm,
                                "first_minibatch_cold_s": cold_mb, "first_minibatch_warm_s": warm_mb}  # fmt: skip
    report.lines.append(rounds.header("index cache bars"))
    report.lines.append("# times are medians of the runs, each in a fresh process; files in the page cache")
    report.lines.append("")
    index_header = [
        "file", "size", "index s", "CPU s", "GB/s", "bar >= 4 GB/s", "CNTK GB/s", "/ CNTK", "wc -l GB/s", "/ wc -l",
    ]  # fmt: skip
    title = "## Indexing on every core, against CNTK's indexer and a newline scan"
    report.section(title, _table(index_header, index_rows))
    header = [
        "file", "size", "index s", "GB/s", "first open s", "second open s", "speed-up", "bar >= 20x",
        "1st minibatch cold s", "<= index + chunk", "1st minibatch warm s", "bar <= 0.2 s", "check",
    ]  # fmt: skip
    title = "## Persisted index (cache_index=True): second open against the first, time to the first minibatch"
    report.section(title, _table(header, rows))
    return report.finish(args, results)


if __name__ == "__main__":
    sys.exit(main())
