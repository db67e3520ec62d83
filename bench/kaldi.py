#!/usr/bin/env python3
"""Kaldi against HTK: the same float32 frames read by KaldiDeserializer (one binary archive, ``FM`` matrices,
listed in feats.scp) and by HTKFeatureDeserializer (one HTK archive, ranged SCP entries), get_chunk over every
chunk, nothing else. Also Kaldi's compressed ``CM2`` (two bytes a value) and ``CM`` (percentiles, one byte).

Every measurement runs in a fresh subprocess (imports untimed; the files are in the page cache: each is dropped from
it and read once, front to back, before the rounds, so that every file's cached pages are alike), round-robin over
--runs rounds; the summary shows medians of MB/s, MB being 10^6 bytes of float32 frames (utterances x frames x dim x
4), whatever the file holds: building the deserializer (the index) plus reading every chunk, and reading alone
(decoding), with the ratios Kaldi / HTK (bar >= 1.0 for FM against HTK). Each child checks the float64 sum of the
values it read against the generator's.

Data: $BENCH_DATA or ./bench-data, under kaldi/ (generated once per size with NumPy and cntkio.htk).
  python bench/kaldi.py [--mb 200] [--runs 5] [--dim 40] [--frames 300] [--json out.json]
  python bench/kaldi.py --smoke     # 4 MB, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

READERS = ("htk", "kaldi-FM", "kaldi-CM2", "kaldi-CM")


def frames_of(count: int, frames: int, dim: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(0, 1, (frames, dim)).astype(np.float32) for _ in range(count)]


def write_kaldi(ark: Path, scp: Path, matrices: dict[str, np.ndarray], kind: str) -> None:
    """FM as stored, CM2 (global min/range, uint16) or CM (per-column percentiles, uint8), written as Kaldi does."""
    lines = []
    with open(ark, "wb") as out:
        for key, m in matrices.items():
            out.write(key.encode() + b" ")
            lines.append(f"{key} {ark}:{out.tell()}\n")
            rows, cols = m.shape
            if kind == "FM":
                out.write(b"\0BFM " + struct.pack("<bibi", 4, rows, 4, cols) + m.astype("<f4").tobytes())
                continue
            lo, hi = float(m.min()), float(m.max())
            span = hi - lo or 1.0
            out.write(b"\0B" + (b"CM2 " if kind == "CM2" else b"CM ") + struct.pack("<ffii", lo, span, rows, cols))
            if kind == "CM2":
                out.write(np.round((m - lo) / span * 65535).astype("<u2").tobytes())
            else:  # percentile headers (0, 25, 75, 100 % of each column) then one byte a value, column-major
                q = np.percentile(m, [0, 25, 75, 100], axis=0)
                headers = np.clip(np.round((q - lo) / span * 65535), 0, 65535).astype(np.int64)
                headers = np.maximum.accumulate(headers + np.arange(4)[:, None], axis=0).clip(0, 65535)
                out.write(headers.T.astype("<u2").tobytes())
                out.write(np.random.default_rng(1).integers(0, 256, (cols, rows), dtype=np.uint8).tobytes())
    scp.write_text("".join(lines))


def generate(folder: Path, mb: int, frames: int, dim: int) -> dict[str, Any]:
    meta_path = folder / "meta.json"
    if meta_path.exists():
        return dict(json.loads(meta_path.read_text()))
    from cntkio.htk import write_archive, write_scp

    folder.mkdir(parents=True, exist_ok=True)
    count = max(1, mb * 10**6 // (frames * dim * 4))
    utterances = {f"utt{i:06d}": m for i, m in enumerate(frames_of(count, frames, dim))}
    write_scp(folder / "htk.scp", write_archive(folder / "htk.ark", utterances, big_endian=False))
    for kind in ("FM", "CM2", "CM"):
        write_kaldi(folder / f"{kind}.ark", folder / f"{kind}.scp", utterances, kind)
    meta = {
        "utterances": count,
        "frames": frames,
        "dim": dim,
        "sum": float(sum(float(m.sum(dtype=np.float64)) for m in utterances.values())),
    }
    meta_path.write_text(json.dumps(meta))
    return meta


def child(reader: str, folder: Path, dim: int) -> dict[str, Any]:
    from cntkio import HTKFeatureDeserializer, KaldiDeserializer, StreamDef, StreamDefs

    start = time.perf_counter()
    if reader == "htk":
        d: Any = HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=dim, scp=str(folder / "htk.scp"))))
    else:
        kind = reader.split("-")[1]
        d = KaldiDeserializer(StreamDefs(f=StreamDef(shape=dim, scp=str(folder / f"{kind}.scp"))))
    indexed = time.perf_counter()
    total, count, reading = 0.0, 0, 0.0
    for c in range(d.num_chunks()):
        begin = time.perf_counter()
        values = d.get_chunk(c)["f"].values
        reading += time.perf_counter() - begin
        total += float(values.sum(dtype=np.float64)) if reader in ("htk", "kaldi-FM") else 0.0  # (untimed)
        count += values.size
    return {"seconds": indexed - start + reading, "index": indexed - start, "read": reading, "values": count,
            "sum": total}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--dim", type=int, default=40)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, Path(args.folder), args.dim)))
        return 0
    if args.smoke:
        args.mb, args.runs = 4, 1
    folder = Path(os.environ.get("BENCH_DATA", "bench-data")) / "kaldi" / f"{args.mb}mb_{args.frames}x{args.dim}"
    meta = generate(folder, args.mb, args.frames, args.dim)
    for f in sorted(folder.glob("*.ark")):  # into the page cache, every file alike
        with open(f, "rb") as file:
            # dropped first, then read front to back: pages cached as they were written (small folios) cost the
            # kernel's copy more than pages read ahead (large folios), which made one format look slower than the
            # other for the page cache's history alone (HTK 2.7 ms, Kaldi 3.6 ms for the same 14 MB pread)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while file.read(1 << 24):
                pass
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in READERS}
    ok = True
    expected_values = meta["utterances"] * meta["frames"] * meta["dim"]
    for _ in range(args.runs):
        for reader in READERS:
            out = subprocess.run(
                [sys.executable, __file__, "--child", reader, "--folder", str(folder), "--dim", str(args.dim)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(out.stdout)
            good = result["values"] == expected_values
            if reader in ("htk", "kaldi-FM"):
                good = good and abs(result["sum"] - meta["sum"]) <= 1e-6 * max(1.0, abs(meta["sum"]))
            result["check"] = "ok" if good else "BAD"
            ok = ok and good
            results[reader].append(result)
    mb = expected_values * 4 / 1e6
    summary = {}
    print(f"{meta['utterances']} utterances x {meta['frames']} frames x {meta['dim']} float32 = {mb:.0f} MB, "
          f"{args.runs} run(s), medians")  # fmt: skip
    print("  reader       index+read MB/s   read-only MB/s   index s   check")
    for reader in READERS:
        seconds = statistics.median(r["seconds"] for r in results[reader])
        read_s = statistics.median(r["read"] for r in results[reader])
        index_s = statistics.median(r["index"] for r in results[reader])
        summary[reader] = {"MB/s": mb / seconds, "read MB/s": mb / read_s, "index s": index_s,
                           "check": results[reader][-1]["check"]}  # fmt: skip
        print(f"  {reader:10s} {mb / seconds:14.0f} {mb / read_s:16.0f} {index_s:11.4f}   {summary[reader]['check']}")
    for reader in READERS[1:]:
        both = summary[reader]["MB/s"] / summary["htk"]["MB/s"]
        decode = summary[reader]["read MB/s"] / summary["htk"]["read MB/s"]
        summary[reader].update(ratio_to_htk=both, read_ratio_to_htk=decode)
        bar = "  (bar >= 1.0)" if reader == "kaldi-FM" else ""
        print(f"  {reader} / htk: {both:.2f} index+read, {decode:.2f} read only{bar}")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "summary": summary, "runs": results}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
