#!/usr/bin/env python3
"""Remote reading against local reading: one CTF file (dense, 32 MiB chunks) read in one randomized sweep by
``MinibatchSource`` from the local disk, over HTTP (a Range server, tests/storage_servers.py, in its own process) and,
with --s3, from moto's S3-compatible server (its own process) — same file, same options, on loopback.

Every measurement runs in a fresh subprocess, round-robin over --runs rounds (the index comes from a warm index
cache in every case, so the sweep is what is timed; opening is reported apart). Reported per reader: medians of
MB/s (file bytes / sweep seconds), CPU seconds of the reading process, and bytes fetched / file bytes (each chunk's
bytes fetched once: bar <= 1.1); ratios remote / local (bar >= 0.8). Each child checks the sum of the values.
With --latency MS and --rate MB/s the HTTP server answers each request that much later and sends each response at
that rate (a network link to a store, emulated on loopback), and a second HTTP reader, "http-noahead", reads without
fetching queued chunks ahead (``remote.configure(fetch_ahead=False)``: what the fetch ahead is worth).

Data: $BENCH_DATA or ./bench-data, under remote/ (generated once per size).
  python bench/remote.py [--mb 256] [--runs 5] [--s3] [--latency MS] [--rate MBPS] [--json out.json]
  python bench/remote.py --smoke     # 16 MB, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DIM = 64
CHUNK = 32 << 20

CHILD = r"""
import json, resource, sys, time
import numpy as np
from cntkio import CTFDeserializer, MinibatchSource, StreamDef, StreamDefs, remote
path, cache, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
remote.configure(**options.pop("settings", {}))
if options:
    remote.configure("s3", **options)
streams = StreamDefs(x=StreamDef(shape=DIM))
opened = time.perf_counter()
reader = CTFDeserializer(path, streams, chunk_size_in_bytes=CHUNK, cache_index=True, index_cache_dir=cache)
opened = time.perf_counter() - opened
source = MinibatchSource(reader, max_sweeps=1, randomization_window_in_chunks=4)
before, cpu = remote.fetch_stats().bytes, resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
total = 0.0
while True:
    batch = source.next_minibatch(2048)
    if not batch:
        break
    total += float(np.asarray(batch[source.streams.x].asarray(), dtype=np.float64).sum())
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": seconds, "cpu": after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime,
                  "fetched": remote.fetch_stats().bytes - before, "sum": total, "open": opened}))
""".replace("DIM", str(DIM)).replace("CHUNK", str(CHUNK))

SERVE_HTTP = r"""
import sys, time
sys.path.insert(0, TESTS)
from storage_servers import RangeServer
server = RangeServer(sys.argv[1], latency=float(sys.argv[2]) / 1000, rate=float(sys.argv[3]) * 1e6 or None)
print(server.url, flush=True)
time.sleep(10**6)
""".replace("TESTS", repr(str(ROOT / "tests")))

SERVE_S3 = r"""
import json, sys, time
sys.path.insert(0, TESTS)
from storage_servers import moto_s3
with moto_s3() as options:
    import boto3
    client = boto3.client("s3", endpoint_url=options["endpoint_url"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    client.create_bucket(Bucket="bench")
    client.upload_file(sys.argv[1], "bench", "data.ctf")
    print(json.dumps(options), flush=True)
    time.sleep(10**6)
""".replace("TESTS", repr(str(ROOT / "tests")))


def make_data(mb: int) -> tuple[Path, float]:
    base = Path(os.environ.get("BENCH_DATA", "bench-data")) / "remote"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"dense-{mb}mb.ctf"
    total_file = path.with_suffix(".sum")
    if not path.exists() or not total_file.exists():
        rng = np.random.default_rng(0)
        total = 0.0
        with open(path, "w") as out:
            key = 0
            while out.tell() < mb * 10**6:
                values = np.round(rng.random((2000, DIM)), 3)
                total += float(values.sum())
                lines = [f"{key + i} |x " + " ".join(f"{v:.3f}" for v in row) + "\n" for i, row in enumerate(values)]
                out.write("".join(lines))
                key += 2000
        total_file.write_text(repr(total))
    return path, float(total_file.read_text())


def run_child(path: str, cache: str, options: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, path, cache, json.dumps(options)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--s3", action="store_true", help="also read from moto's S3 server")
    parser.add_argument("--latency", type=float, default=0.0, help="HTTP: milliseconds before each answer")
    parser.add_argument("--rate", type=float, default=0.0, help="HTTP: MB/s of each response (0: unpaced)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.smoke:
        args.mb, args.runs = 16, 1
    path, expected = make_data(args.mb)
    size = path.stat().st_size
    servers = []
    served = [str(path.parent), str(args.latency), str(args.rate)]
    http = subprocess.Popen([sys.executable, "-c", SERVE_HTTP, *served], stdout=subprocess.PIPE, text=True)
    servers.append(http)
    assert http.stdout is not None
    url = http.stdout.readline().strip() + path.name
    readers: dict[str, tuple[str, dict[str, Any]]] = {"local": (str(path), {}), "http": (url, {})}
    if args.latency or args.rate:
        readers["http-noahead"] = (url, {"settings": {"fetch_ahead": False}})
    if args.s3:
        s3 = subprocess.Popen([sys.executable, "-c", SERVE_S3, str(path)], stdout=subprocess.PIPE, text=True)
        servers.append(s3)
        assert s3.stdout is not None
        readers["s3"] = ("s3://bench/data.ctf", json.loads(s3.stdout.readline()))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in readers}
    try:
        with tempfile.TemporaryDirectory() as cache:
            for where, options in readers.values():  # warm: the index cache built, the file in the page cache
                run_child(where, cache, options)
            for _ in range(args.runs):
                for name, (where, options) in readers.items():
                    result = run_child(where, cache, options)
                    assert abs(result["sum"] - expected) <= 1e-6 * abs(expected), (name, result["sum"], expected)
                    results[name].append(result)
    finally:
        for server in servers:
            server.terminate()
    summary: dict[str, Any] = {"mb": round(size / 1e6, 1), "chunk_bytes": CHUNK, "runs": args.runs,
                               "date": time.strftime("%Y-%m-%d"), "readers": {}}  # fmt: skip
    local = statistics.median(size / 1e6 / r["seconds"] for r in results["local"])
    print(f"{size / 1e6:.0f} MB dense CTF, 32 MiB chunks, {args.runs} rounds (medians)")
    print(f"{'reader':8} {'MB/s':>8} {'x local':>8} {'CPU s':>7} {'fetched/bytes':>14} {'open s':>7}")
    for name, rows in results.items():
        rate = statistics.median(size / 1e6 / r["seconds"] for r in rows)
        cpu = statistics.median(r["cpu"] for r in rows)
        fetched = statistics.median(r["fetched"] for r in rows) / size
        opened = statistics.median(r["open"] for r in rows)
        summary["readers"][name] = {"mb_per_s": rate, "ratio": rate / local, "cpu_s": cpu, "fetched_ratio": fetched,
                                    "open_s": opened}  # fmt: skip
        print(f"{name:8} {rate:8.1f} {rate / local:8.2f} {cpu:7.2f} {fetched:14.3f} {opened:7.2f}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
