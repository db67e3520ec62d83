"""What the bench scripts share: a measurement run as a child process of the script that was started, with its
result as the last line of the child's stdout (JSON). A fresh process per measurement keeps imports and caches of
one measurement out of the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


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
