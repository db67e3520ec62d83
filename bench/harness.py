"""What the bench scripts share: a measurement run as a child process of the script that was started, with its
result as the last line of the child's stdout (JSON). A fresh process per measurement keeps imports and caches of
one measurement out of the next."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Child = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Job:
    """One measurement: ``child`` names the function the script runs with ``spec`` when given ``--child``."""

    label: str
    child: str
    spec: dict[str, Any]

    @property
    def argv(self) -> list[str]:
        script = os.path.abspath(sys.argv[0])  # the bench script that was started runs its own children
        return [sys.executable, script, "--child", self.child, "--spec", json.dumps(self.spec)]


def run(job: Job) -> dict[str, Any]:
    """The child's result; a failed child gives {"failed": its last stderr line}."""
    done = subprocess.run(job.argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        print(f"{job.label} failed (exit {done.returncode}):\n{done.stderr}", file=sys.stderr)
        return {"failed": f"exit {done.returncode}: {last}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Rounds:
    """Runs the correctness jobs once, then the timed jobs round-robin ``runs`` times (so slow drifts of a shared
    machine spread over every configuration); ``results[label]`` lists each job's results."""

    def __init__(self, timed: list[Job], checks: list[Job], runs: int):
        self.load_before = os.getloadavg()[0]
        self.runs = runs
        self.results: dict[str, list[dict[str, Any]]] = {job.label: [] for job in timed + checks}
        for job in checks:
            print(f"check: {job.label}", file=sys.stderr)
            self.results[job.label].append(run(job))
        for round_number in range(1, runs + 1):
            for job in timed:
                print(f"round {round_number}/{runs}: {job.label}", file=sys.stderr)
                self.results[job.label].append(run(job))

    def header(self, title: str) -> str:
        """The first line of a report: what ran, when, on how many cores, and the machine's load around it."""
        return (
            f"# {title}  {time.strftime('%Y-%m-%d %H:%M')}  runs={self.runs}  nproc={os.cpu_count()}  "
            f"load avg (1 min) before/after: {self.load_before:.2f}/{os.getloadavg()[0]:.2f}"
        )


def repeated_file(part: Path, copies: int, target: Path) -> Path:
    """``target``: ``part`` written ``copies`` times (made once, through a temporary file renamed at the end, so an
    interrupted run never leaves a short file behind)."""
    if not target.exists():
        if not part.exists():
            sys.exit(f"{part} is missing: make it with ../shared/bench/gen.py first")
        partial = target.with_suffix(".tmp")
        with open(partial, "wb") as out:
            for _ in range(copies):
                with open(part, "rb") as f:
                    while block := f.read(1 << 26):
                        out.write(block)
        partial.rename(target)
    return target


def machine() -> dict[str, Any]:
    """Where and when a run was measured, for its JSON document (the docs' performance tables print it)."""
    import platform

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "cpu": model,
        "cores": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def peak_rss() -> int:
    """Peak resident bytes of this process (VmHWM). Not ru_maxrss: a child's ru_maxrss starts at its parent's peak,
    which it inherits across fork + exec."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def parser(description: str | None, children: Mapping[str, Child], smoke: str) -> argparse.ArgumentParser:
    """The options of every bench script: ``--runs``, ``--data``, ``--json``, ``--smoke`` (``smoke`` says what it
    shrinks) and the hidden ``--child``/``--spec`` a script's children run with; the script adds its own."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="rounds; every measurement runs once per round")
    ap.add_argument("--data", default=os.environ.get("BENCH_DATA", "bench-data"), help="data directory")
    ap.add_argument("--json", help="write every run and the summary here")
    ap.add_argument("--smoke", action="store_true", help=f"{smoke}: a sanity check")
    ap.add_argument("--child", choices=sorted(children), help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    return ap


def run_child(args: argparse.Namespace, children: Mapping[str, Child]) -> bool:
    """In a child process (``--child``): runs the measurement and prints its result, with the process's peak RSS,
    as the JSON line :func:`run` reads; returns whether this was a child."""
    if not args.child:
        return False
    result = children[args.child](json.loads(args.spec))
    print(json.dumps({**result, "peak_rss_mb": peak_rss() / 2**20}))
    return True
