"""Writes the small CTF example files in examples/data/ (deterministic; run from anywhere).

- ``sequences.ctf``: 12 sequences of 2 to 7 steps, with numeric ids. Each step has a dense 3-value
  ``|features`` sample. The first step of each sequence also has a one-hot sparse ``|label`` (4 classes)
  and, every fourth sequence, a ``|#`` comment.
- ``broken.ctf``: the same layout with a few deliberate mistakes, for ``cntkio inspect`` to find.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
NUM_SEQUENCES = 12
NUM_CLASSES = 4

BROKEN = """\
0 |features 0.12 -1.5 2.25 |label 1:1 |# a valid first step
0 |features 0.5 .5 1.0
0 |features 3.0 0.25 -0.75
1 |features 1e-3 2.5 1,5 |label 0:1
1 |features 0.1 0.2 0.3
2 |features 0.7 -0.2 0.4 |label 9:1
2 |features 0.3 0.3x 0.1
3 |features 0.0 0.0 1.0
"""


def sequences_text(seed: int = 7) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for seq in range(NUM_SEQUENCES):
        length = int(rng.integers(2, 8))
        label = int(rng.integers(NUM_CLASSES))
        for step in range(length):
            values = " ".join(f"{v:.3f}" for v in rng.normal(label, 1.0, size=3))
            line = f"{seq} |features {values}"
            if step == 0:
                line += f" |label {label}:1"
                if seq % 4 == 0:
                    line += f" |# sequence {seq}: class {label}, {length} steps"
            lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    DATA.mkdir(exist_ok=True)
    (DATA / "sequences.ctf").write_text(sequences_text())
    (DATA / "broken.ctf").write_text(BROKEN)


if __name__ == "__main__":
    main()
