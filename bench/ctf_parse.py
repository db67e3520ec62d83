#!/usr/bin/env python3
"""CTF parse benchmark: cntkio beside the bench kit's anchors, in one run, as ratios.

Generates the kit's dense and sparse data (gen.py), then drives the kit's anchors.py with cntkio as
candidates (bench/cntkio_candidates.py), so every entry runs in a fresh subprocess under the same rules:

  cntkio raw  CTFDeserializer with one chunk larger than the file, returning the arrays of get_chunk(0);
              the timed call includes building the index and the parse (single thread).
  cntkio e2e  MinibatchSource(randomize=False, max_sweeps=1) with next_minibatch(1024) until {} (default
              chunk size and prefetch), taking sum(|v|) of every minibatch.

Then prints a summary: MB/s (MB = 10^6 bytes of CTF text, median of --runs) and the ratios the targets are
stated in. The CNTK C++ figures are constants (measured on this kind of machine), not measured here.

Kit: $CNTKIO_SHARED_BENCH or ../shared/bench beside the repo root. Data: $BENCH_DATA or ./bench-data.
  python bench/ctf_parse.py [--mb 200] [--runs 3] [--json out.json]
  python bench/ctf_parse.py --smoke        # --mb 2 --runs 1: a sanity check in well under a minute
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent

CNTK_CPP_MBPS = {"dense": 230.0, "sparse": 225.0}  # CNTK's own C++ CTF parser, 1 thread (from the issue)
RAW_TARGET_MBPS = {"dense": 300.0, "sparse": 290.0}
SVMLIGHT_TARGET_X = 6.0
E2E_TARGET = 0.70

CANDIDATES = [
    ("cntkio raw", "raw_dense", "dense"),
    ("cntkio raw", "raw_sparse", "sparse"),
    ("cntkio e2e", "end_to_end_dense", "dense"),
    ("cntkio e2e", "end_to_end_sparse", "sparse"),
]
DENSE_ANCHORS = [
    "pandas.read_csv c",
    "pandas.read_csv pyarrow",
    "pyarrow.csv threads",
    "pyarrow.csv 1 thread",
    "polars.read_csv",
    "polars.read_csv 1 thread",
    "numpy.loadtxt(csv)",
    "np.load(.npy)",
    "naive Python CTF dense",
]


def kit_dir() -> Path:
    kit = Path(os.environ.get("CNTKIO_SHARED_BENCH", REPO_ROOT.parent / "shared" / "bench"))
    for name in ("gen.py", "anchors.py"):
        if not (kit / name).is_file():
            sys.exit(f"bench kit not found: {kit / name} (set CNTKIO_SHARED_BENCH)")
    return kit


def load_anchors(kit: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_kit_anchors", kit / "anchors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generate(anchors: ModuleType, args: argparse.Namespace) -> None:
    """Writes the kit's files with gen.py (skipped when present), with anchors.py's own naming."""
    for kind in ("dense", "sparse"):
        for mb in {args.mb, args.slice_mb}:
            meta = anchors.ensure_data(kind, mb, args.seed, args.data, sys.executable)
            ctf = meta["files"]["ctf"]
            print(f"data: {ctf['path']}  {ctf['bytes'] / 1e6:.1f} MB  {meta['rows']} rows", file=sys.stderr)


def run_anchors(kit: Path, args: argparse.Namespace, json_path: str) -> dict[str, Any]:
    """Runs anchors.py (its table and progress pass through) and returns its JSON document."""
    argv = [
        sys.executable,
        str(kit / "anchors.py"),
        "--data",
        args.data,
        "--mb",
        str(args.mb),
        "--slice-mb",
        str(args.slice_mb),
        "--seed",
        str(args.seed),
        "--runs",
        str(args.runs),
        "--json",
        json_path,
    ]
    for name, function, kind in CANDIDATES:
        argv += ["--candidate", f"{name}=cntkio_candidates:{function}:{kind}"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    subprocess.run(argv, env=env, check=True)
    with open(json_path) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def summarize(doc: dict[str, Any], load_before: float) -> tuple[str, dict[str, Any]]:
    """The summary table (text) and its numbers; a 1-minute load average above 0 means other work ran."""
    entries = {e["name"]: e for e in doc["entries"]}

    def mbps(name: str) -> float:
        return float(entries[name]["ctf_mbps_med"]) if name in entries else float("nan")

    lines: list[str] = []
    rows: list[tuple[str, str, str, str, str, str]] = []
    ratios: list[tuple[str, str, str, str]] = []
    numbers: dict[str, Any] = {"mbps": {}, "ratios": {}}

    def add_row(name: str) -> None:
        e = entries.get(name)
        if e is None:
            return
        numbers["mbps"][name] = e["ctf_mbps_med"]
        speed, per_cpu, rss = (
            f"{e['ctf_mbps_med']:.1f}",
            f"{e['ctf_mb_per_cpu_s']:.1f}",
            f"{e['peak_rss_mb']:.0f}",
        )
        rows.append((name, e["kind"], speed, per_cpu, rss, e["check"]))

    def add_ratio(label: str, value: float, target: str, ok: bool | None, key: str) -> None:
        numbers["ratios"][key] = value
        ratios.append((label, f"{value:.2f}x", target, "-" if ok is None else verdict(ok)))

    for kind in ("dense", "sparse"):
        add_row(f"cntkio raw {kind}")
        add_row(f"cntkio e2e {kind}")
    for name in [*DENSE_ANCHORS, "sklearn load_svmlight", "naive Python CTF sparse"]:
        add_row(name)

    for kind in ("dense", "sparse"):
        raw, e2e = mbps(f"cntkio raw {kind}"), mbps(f"cntkio e2e {kind}")
        ref, target = CNTK_CPP_MBPS[kind], RAW_TARGET_MBPS[kind]
        add_ratio(
            f"cntkio raw {kind} / CNTK C++ (constant ~{ref:.0f} MB/s)",
            raw / ref,
            f">= {target / ref:.2f}x (>= {target:.0f} MB/s)",
            raw >= target,
            f"raw_vs_cntk_{kind}",
        )
        add_ratio(
            f"cntkio e2e {kind} / cntkio raw {kind}",
            e2e / raw,
            f">= {E2E_TARGET:.2f}x",
            e2e / raw >= E2E_TARGET,
            f"e2e_vs_raw_{kind}",
        )
    svm = mbps("sklearn load_svmlight")
    raw_sparse = mbps("cntkio raw sparse")
    add_ratio(
        "cntkio raw sparse / sklearn load_svmlight_file",
        raw_sparse / svm,
        f">= {SVMLIGHT_TARGET_X:.0f}x",
        raw_sparse / svm >= SVMLIGHT_TARGET_X,
        "raw_vs_svmlight",
    )
    raw_dense = mbps("cntkio raw dense")
    for name in DENSE_ANCHORS:
        if name in entries:
            add_ratio(f"cntkio raw dense / {name}", raw_dense / mbps(name), "-", None, f"raw_vs_{name}")

    machine = doc.get("machine", {})
    lines.append(
        f"# CTF parse summary  {doc.get('date', '')}  runs={doc.get('runs')}  "
        f"CPU: {machine.get('Model name', '?')}  nproc={machine.get('nproc')}  "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}  "
        f"load avg (1 min) before/after: {load_before:.2f}/{os.getloadavg()[0]:.2f}"
    )
    sizes = {k: v["full"]["files"]["ctf"]["bytes"] / 1e6 for k, v in doc["data"].items()}
    lines.append(
        "# CTF files: "
        + ", ".join(f"{k} {mb:.1f} MB" for k, mb in sizes.items())
        + "; MB/s = 10^6 bytes of CTF-equivalent text per second, median of runs"
    )
    lines.append("# cntkio raw = index + parse of one chunk, 1 thread; e2e = MinibatchSource, minibatches of 1024")
    lines.append("")
    lines.append(_table(("entry", "kind", "CTF MB/s", "CTF MB/CPU-s", "peak RSS MB", "check"), rows))
    lines.append("")
    lines.append(_table(("ratio", "value", "target", "verdict"), ratios))
    bad = [r[0] for r in rows if r[0].startswith("cntkio") and r[5] != "ok"]
    numbers["cntkio_checks_ok"] = not bad
    lines.append("")
    lines.append("cntkio checksums: " + ("all ok" if not bad else "NOT OK for " + ", ".join(bad)))
    return "\n".join(lines), numbers


def _table(header: tuple[str, ...], rows: list[Any]) -> str:
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for j, r in enumerate(cells):
        padded = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        out.append("| " + " | ".join(padded) + " |")
        if j == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200.0, help="size of each CTF file in MiB (kit's gen.py)")
    ap.add_argument("--runs", type=int, default=3, help="rounds; every entry runs once per round")
    ap.add_argument("--slice-mb", type=float, default=20.0, help="file size for the naive Python parser")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=os.environ.get("BENCH_DATA", "bench-data"), help="data directory")
    ap.add_argument("--json", help="write anchors.py's results plus the summary here")
    ap.add_argument("--smoke", action="store_true", help="tiny sanity run: --mb 2 --runs 1")
    args = ap.parse_args(argv)
    if args.smoke:
        args.mb, args.runs = 2.0, 1
    args.slice_mb = min(args.slice_mb, args.mb)

    kit = kit_dir()
    generate(load_anchors(kit), args)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        doc = run_anchors(kit, args, args.json or os.path.join(tmp, "anchors.json"))
    text, numbers = summarize(doc, load_before)
    print()
    print(text)
    if args.json:
        doc["summary"] = {
            "text": text,
            **numbers,
            "constants": {"cntk_cpp_mbps": CNTK_CPP_MBPS, "raw_target_mbps": RAW_TARGET_MBPS},
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if numbers["cntkio_checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
