#!/usr/bin/env python3
"""The hand-off bars (issue 25): what users run beside the reader alone and CNTK's parser, in one run.

For the kit's dense, sparse and seq files (randomized, seed 1, one sweep, minibatches of 1024 samples), each
configuration in a fresh subprocess, round-robin over --runs rounds, medians; MB/s of CTF text, ratios to CNTK's own
C++ parser (the kit's ctf_oracle) and CPU-seconds per MB (the process and its loader workers):

  raw              CTFDeserializer + get_chunk of the whole file as one chunk (index + parse, one thread)
  source           MinibatchSource, next_minibatch(1024) to the end (default parse threads)
  source 1 thread  the same with num_parse_threads=1
  dataset          cntkio.torch.MinibatchDataset, no DataLoader workers, ahead=0 (the hand-off alone)
  dataset ahead    the same with ahead=2 (the default: a background thread assembles the next minibatches)
  loader 2 workers cntkio.torch.loader(num_workers=2) (bundles over shared memory)
  CNTK             ctf_oracle FILE kind

Bars: dataset >= 0.9x source (dense, sparse, seq); loader 2 workers >= 1.0x dataset and <= 1.3x its CPU per MB;
seq: source >= 2.0x CNTK, source 1 thread >= 0.8x raw.

  python bench/handoff.py [--mb 200] [--runs 5] [--json out.json]
  python bench/handoff.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import stream_defs
from ctf_parse import kit_dir
from harness import machine

KINDS = ("dense", "sparse", "seq")
CONFIGS = ("raw", "source", "source 1 thread", "dataset", "dataset ahead", "loader 2 workers", "CNTK")
MINIBATCH = 1024


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def make_source(path: str, kind: str, threads: int | None = None) -> Any:
    from cntkio import CTFDeserializer, MinibatchSource

    options = {} if threads is None else {"num_parse_threads": threads}
    return MinibatchSource(CTFDeserializer(path, stream_defs(kind)), randomization_seed=1, max_sweeps=1, **options)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    import functools

    config, path, kind = spec["config"], spec["file"], spec["kind"]
    if config.startswith(("dataset", "loader")):
        import torch  # noqa: F401  (imported before the clock starts, as a training script has it)

        from cntkio.torch import MinibatchDataset, loader
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    samples = 0
    if config == "raw":
        from cntkio import CTFDeserializer

        chunk = CTFDeserializer(path, stream_defs(kind), chunk_size_in_bytes=os.path.getsize(path) + 1).get_chunk(0)
        samples = max(len(data.seq_offsets) for data in chunk.values())
    elif config.startswith("source"):
        source = make_source(path, kind, 1 if config == "source 1 thread" else None)
        while minibatch := source.next_minibatch(MINIBATCH):
            samples += next(iter(minibatch.values())).num_samples  # (the first stream, as below)
        source.close()
    else:
        make = functools.partial(make_source, path, kind)
        if config == "loader 2 workers":
            batches: Any = loader(make, MINIBATCH, num_workers=2)
        else:
            batches = MinibatchDataset(make, MINIBATCH, ahead=2 if config == "dataset ahead" else 0)
        for batch in batches:
            samples += int(next(iter(batch.lengths.values())).sum())
        del batches
    return {"seconds": time.perf_counter() - t0, "cpu_s": cpu_seconds() - cpu0, "samples": samples}


def run(argv: list[str]) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.smoke:
        args.mb, args.runs = 2.0, 1
    kit = kit_dir()
    data = Path(os.environ.get("BENCH_DATA", "bench-data"))
    files = {}
    for kind in KINDS:
        name = f"{kind}_{args.mb:g}mb_s1.ctf"
        if not (data / name).exists():
            subprocess.run([sys.executable, str(kit / "gen.py"), "--kind", kind, "--mb", f"{args.mb:g}"], check=True,
                           env={**os.environ, "BENCH_DATA": str(data)})  # fmt: skip
        files[kind] = data / name
    oracle = kit / "cntk-ctf-oracle" / "ctf_oracle"
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for kind in KINDS:
            for config in CONFIGS:
                if config == "CNTK":
                    argv = [str(oracle), str(files[kind]), kind]
                else:
                    spec = {"config": config, "file": str(files[kind]), "kind": kind}
                    argv = [sys.executable, __file__, "--child", json.dumps(spec)]
                results.setdefault((kind, config), []).append(run(argv))
    report: dict[str, Any] = {"machine": machine(), "mb": args.mb, "runs": args.runs}
    problems = []
    print(f"# Hand-off: {args.runs} rounds, medians; MB/s of CTF text (x CNTK), CPU-s per MB\n")
    print("| kind | " + " | ".join(CONFIGS) + " |")
    print("|---" * (len(CONFIGS) + 1) + "|")
    for kind in KINDS:
        mb = files[kind].stat().st_size / 1e6
        seconds = {c: statistics.median(r["seconds"] for r in results[(kind, c)]) for c in CONFIGS}
        cpu = {c: statistics.median(r["cpu_s"] for r in results[(kind, c)]) for c in CONFIGS}
        counts = {r["samples"] for c in CONFIGS[1:-1] for r in results[(kind, c)]}
        if len(counts) != 1:
            problems.append(f"{kind}: configurations delivered different sample counts {sorted(counts)}")
        rate = {c: mb / seconds[c] for c in CONFIGS}
        cells = [f"{rate[c]:.0f} ({rate[c] / rate['CNTK']:.2f}x) {cpu[c] / mb * 1000:.1f}ms" for c in CONFIGS]
        print(f"| {kind} | " + " | ".join(cells) + " |")
        ratios = {
            "dataset / source": rate["dataset"] / rate["source"],
            "dataset ahead / source": rate["dataset ahead"] / rate["source"],
            "loader 2 workers / dataset": rate["loader 2 workers"] / rate["dataset"],
            "loader 2 workers CPU per MB / dataset": cpu["loader 2 workers"] / cpu["dataset"],
            "source / CNTK": rate["source"] / rate["CNTK"],
            "source 1 thread / raw": rate["source 1 thread"] / rate["raw"],
        }
        report[kind] = {"mb_per_s": rate, "cpu_s": cpu, "ratios": ratios}
        bars = [
            ("dataset / source", ratios["dataset / source"] >= 0.9),
            ("loader 2 workers / dataset", ratios["loader 2 workers / dataset"] >= 1.0),
            ("loader 2 workers CPU per MB / dataset", ratios["loader 2 workers CPU per MB / dataset"] <= 1.3),
        ]
        if kind == "seq":
            bars += [
                ("source / CNTK", ratios["source / CNTK"] >= 2.0),
                ("source 1 thread / raw", ratios["source 1 thread / raw"] >= 0.8),
            ]
        print(
            "  "
            + kind
            + ": "
            + ", ".join(f"{name} {ratios[name]:.2f} {'met' if ok else 'NOT met'}" for name, ok in bars)
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if problems:
        print("PROBLEMS: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
