#!/usr/bin/env python3
"""Peak memory of randomized streaming: is it bounded by the randomization window, not the file?

Generates the kit's dense CTF file (gen.py, `|features` 100 + `|labels` 10 per line), then streams it once
per configuration, each in a fresh subprocess, through

  MinibatchSource(CTFDeserializer(file, chunk_size_in_bytes=C), randomize=True,
                  randomization_window_in_chunks=W, max_sweeps=1)  with next_minibatch(1024) until {}

(plus one sequential run, randomize=False, as the reference). Each child samples /proc/self/statm on a
thread (every ms) and reads ru_maxrss at the end. Reported against the RSS after imports (baseline):

  index   RSS growth from building the index (before any chunk is parsed)
  peak    peak RSS growth while streaming, all pages (ru_maxrss and the samples agree up to sampling)
  anon    peak growth of anonymous pages only (statm resident - shared): what the reader allocates.
          The file-backed rest is the index's memory map of the file: clean page-cache pages.

A separate child parses every chunk to measure the parsed-size factor f = bytes of the parsed arrays /
bytes of CTF text. The model is anon <= W * C * f + constant: the window's parsed chunks on top of what
sequential streaming needs (the index, chunks in flight: text buffers and arrays of the background parses,
the runtime). The constant is the sequential run's anon peak; `window cost` = anon - constant, also in
parsed chunks (C * f), which should be about W. A line fitted through the costs must have a slope
<= 1.5 parsed chunks per window chunk and an intercept <= 4 parsed chunks (W + 1 chunks meet at a
window's edge, one more is prefetched, the allocator keeps some freed memory). Every configuration runs
--runs times (fresh process each); the table shows the run with the median anon peak (malloc arenas
make it vary by ~10 MiB).

  python bench/memory.py                 # --mb 320 --chunk-mib 8 --windows 1,2,4,8 --runs 3: ~1 min + data
  python bench/memory.py --mb 40 --chunk-mib 1    # a quicker check at the same file/window ratios

Kit: $CNTKIO_SHARED_BENCH or ../shared/bench beside the repo root. Data: $BENCH_DATA or ./bench-data.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20
ARRAYS = ("values", "indices", "indptr", "seq_offsets")
MAX_SLOPE = 1.5  # parsed chunks of memory per chunk of window
MAX_INTERCEPT_CHUNKS = 4.0  # parsed chunks beyond sequential streaming: W + 1 meet at a window's edge, prefetch


def statm() -> tuple[int, int]:
    """(resident bytes, anonymous resident bytes) of this process."""
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    resident, shared = int(fields[1]) * PAGE, int(fields[2]) * PAGE
    return resident, resident - shared


class Sampler:
    """Peak resident and anonymous bytes, sampled on a thread."""

    def __init__(self, interval: float = 0.001):
        self.interval = interval
        self.peak_rss, self.peak_anon = statm()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        rss, anon = statm()
        self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def streams() -> Any:
    from cntkio import StreamDef, StreamDefs

    return StreamDefs(features=StreamDef(field="features", shape=100), labels=StreamDef(field="labels", shape=10))


def child_stream(args: argparse.Namespace) -> dict[str, Any]:
    """Streams the file once with one configuration; returns its memory figures (bytes)."""
    from cntkio import CTFDeserializer, MinibatchSource

    base_rss, base_anon = statm()
    sampler = Sampler()
    start = time.perf_counter()
    deserializer = CTFDeserializer(args.file, streams(), chunk_size_in_bytes=args.chunk)
    index_rss, index_anon = statm()
    source = MinibatchSource(
        deserializer,
        max_sweeps=1,
        randomize=args.window > 0,
        randomization_window_in_chunks=args.window,
        randomization_seed=1,
    )
    samples = held = 0
    while True:
        minibatch = source.next_minibatch(args.minibatch)
        if not minibatch:
            break
        samples += minibatch["features"].num_samples
        held = max(held, source.cached_chunks)  # parsed chunks the reader holds (diagnostic)
    source.close()
    seconds = time.perf_counter() - start
    sampler.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {
        "window": args.window,
        "chunks": deserializer.num_chunks(),
        "samples": samples,
        "seconds": seconds,
        "base_rss": base_rss,
        "index_rss": index_rss - base_rss,
        "index_anon": index_anon - base_anon,
        "peak_rss": sampler.peak_rss - base_rss,
        "maxrss": maxrss - base_rss,
        "peak_anon": sampler.peak_anon - base_anon,
        "held_chunks": held,
    }


def child_factor(args: argparse.Namespace) -> dict[str, Any]:
    """Bytes of the parsed arrays of every chunk over the bytes of the file, and the largest chunk's arrays."""
    from cntkio import CTFDeserializer

    deserializer = CTFDeserializer(args.file, streams(), chunk_size_in_bytes=args.chunk)
    total = largest = 0
    for chunk_id in range(deserializer.num_chunks()):
        chunk = deserializer.get_chunk(chunk_id)
        size = sum(
            getattr(stream, name).nbytes for stream in chunk.values() for name in ARRAYS if hasattr(stream, name)
        )
        total += size
        largest = max(largest, size)
    return {"factor": total / os.path.getsize(args.file), "largest_chunk": largest}


def run_child(args: argparse.Namespace, mode: str, window: int = 0) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", mode, "--file", str(args.file), "--window", str(window)]
    command += ["--chunk", str(args.chunk), "--minibatch", str(args.minibatch)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"child {mode} W={window} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ensure_data(args: argparse.Namespace) -> Path:
    """The kit's dense file of --mb MiB (generated once with gen.py)."""
    kit = Path(os.environ.get("CNTKIO_SHARED_BENCH", REPO_ROOT.parent / "shared" / "bench"))
    tag = f"{args.mb:g}".replace(".", "p")  # gen.py's naming
    path = Path(args.data) / f"dense_{tag}mb_s{args.seed}.ctf"
    if not path.exists():
        if not (kit / "gen.py").exists():
            sys.exit(f"bench kit not found: {kit / 'gen.py'} (set CNTKIO_SHARED_BENCH)")
        print(f"generating {path} ...", file=sys.stderr)
        command = [sys.executable, str(kit / "gen.py"), "--kind", "dense", "--mb", f"{args.mb:g}"]
        subprocess.run([*command, "--seed", str(args.seed), "--out", str(args.data)], check=True)
    return path


def report(args: argparse.Namespace, factor: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[str, bool]:
    size, chunk, f = os.path.getsize(args.file), args.chunk, factor["factor"]
    parsed_chunk = chunk * f
    sequential = rows[0]
    constant = sequential["peak_anon"]
    lines = [
        f"file {size / MIB:.0f} MiB ({size * f / MIB:.0f} MiB parsed), {sequential['chunks']} chunks of C = "
        f"{chunk / MIB:g} MiB, minibatch {args.minibatch}; parsed-size factor f = {f:.3f} (parsed arrays / CTF "
        f"text bytes; largest parsed chunk {factor['largest_chunk'] / MIB:.1f} MiB); baseline RSS after imports "
        f"{sequential['base_rss'] / MIB:.0f} MiB",
        "",
        "| window | window MiB | file/window | index RSS MiB (anon) | peak RSS MiB | ru_maxrss MiB | anon MiB "
        "| window cost MiB | W*C*f MiB | cost in parsed chunks | chunks held | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        window = row["window"]
        window_bytes = window * chunk
        cost = row["peak_anon"] - constant
        lines.append(
            f"| {f'{window} chunks' if window else 'sequential'} | {window_bytes / MIB:.3g} | "
            f"{f'{size / window_bytes:.0f}x' if window else '-'} | "
            f"{row['index_rss'] / MIB:.0f} ({row['index_anon'] / MIB:.0f}) | {row['peak_rss'] / MIB:.0f} | "
            f"{row['maxrss'] / MIB:.0f} | {row['peak_anon'] / MIB:.0f} | {cost / MIB:.0f} | "
            f"{window_bytes * f / MIB:.0f} | {cost / parsed_chunk:.1f} | {row['held_chunks']} | {row['seconds']:.1f} |"
        )
    windows = np.array([row["window"] for row in rows[1:]], dtype=float)
    costs = np.array([row["peak_anon"] - constant for row in rows[1:]], dtype=float) / parsed_chunk
    slope, intercept = np.polyfit(windows, costs, 1) if len(windows) > 1 else (costs[0] / windows[0], 0.0)
    ok = slope <= MAX_SLOPE and intercept <= MAX_INTERCEPT_CHUNKS
    lines += [
        "",
        f"constant = anon peak of the sequential run: {constant / MIB:.0f} MiB (index "
        f"{sequential['index_anon'] / MIB:.1f} MiB, rest {(constant - sequential['index_anon']) / parsed_chunk:.1f} "
        "parsed chunks: the chunks held and the text buffers of the parses in flight)",
        f"fit: anon = constant + ({intercept:.1f} + {slope:.2f} * W) * C*f = constant + "
        f"{intercept * parsed_chunk / MIB:.0f} MiB + {slope:.2f} * W*C*f",
        f"bounded (anon <= {MAX_SLOPE:g} * W*C*f + {MAX_INTERCEPT_CHUNKS:g} * C*f + constant, from the fit): "
        + ("yes" if ok else "NO"),
        "peak RSS and ru_maxrss also count the index's memory map of the file (clean page-cache pages).",
    ]
    return "\n".join(lines), bool(ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=320.0, help="size of the CTF file in MiB (kit's gen.py)")
    ap.add_argument("--chunk-mib", type=float, default=8.0, help="chunk_size_in_bytes in MiB")
    ap.add_argument("--windows", default="1,2,4,8", help="randomization windows in chunks")
    ap.add_argument("--minibatch", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration (median shown)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.environ.get("BENCH_DATA", "bench-data"), help="data directory")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--child", choices=["stream", "factor"], help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--window", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--chunk", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_stream(args) if args.child == "stream" else child_factor(args)))
        return 0
    args.file = ensure_data(args)
    args.chunk = int(args.chunk_mib * MIB)
    factor = run_child(args, "factor")
    rows = []
    for window in [0, *map(int, args.windows.split(","))]:
        runs = sorted((run_child(args, "stream", window) for _ in range(args.runs)), key=lambda r: r["peak_anon"])
        rows.append(runs[len(runs) // 2])
    text, ok = report(args, factor, rows)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"factor": factor, "rows": rows, "bounded": ok}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
