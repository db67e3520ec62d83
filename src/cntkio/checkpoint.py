"""Checkpoint states of a MinibatchSource: format constants and merging the states of all partitions.

A state is a small JSON-serialisable dict: ``version``, CNTK's ``minibatchSourcePosition``, the sweep and
cursor of the partition, its ``partitioning`` (count, index), the ``layers`` of earlier partitionings of
the current sweeps (their per-partition cursors: what they consumed), a ``fingerprint`` of the data and
configuration, and, for truncated BPTT, the sequences in flight (``bptt_slots``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CHECKPOINT_VERSION = 1
ALL_CONSUMED = 2**62  # a cursor past every position: the partition consumed its whole share of the sweep


def merge_checkpoints(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Combines the states of all k partitions into one that restores with any partition count.

    The sequences the k partitions had not read yet are then shared by the new partitions. A state
    taken before its partition read anything carries no partition index: such states fill the
    missing indices in the order given.
    """
    if not states:
        raise ValueError("no checkpoint states to merge")
    count = len(states)
    placed: dict[int, Mapping[str, Any]] = {}
    unplaced = []
    for state in states:
        partitioning = state.get("partitioning")
        if partitioning is None:
            unplaced.append(state)  # has not read since it was created or restored
        elif int(partitioning[0]) != count or int(partitioning[1]) in placed:
            raise ValueError("merge_checkpoints needs the state of every partition of one partitioning")
        else:
            placed[int(partitioning[1])] = state
    free = [index for index in range(count) if index not in placed]
    placed.update(zip(free, unplaced))
    if any(s.get("bptt_slots") for s in states):
        raise ValueError("truncated BPTT states carry sequences in flight and cannot be merged")
    ordered = [placed[index] for index in range(count)]
    first_sweep = min(int(s["sweep"]) for s in ordered)
    last_sweep = max(int(s["sweep"]) for s in ordered)
    layers: dict[str, list[list[Any]]] = {}
    for sweep in range(first_sweep, last_sweep + 1):
        inherited = ordered[0].get("layers", {}).get(str(sweep), [])
        cursors = [
            int(s["cursor"]) if int(s["sweep"]) == sweep else (ALL_CONSUMED if int(s["sweep"]) > sweep else 0)
            for s in ordered
        ]
        layers[str(sweep)] = [*inherited, [count, cursors]]
    return {
        "version": CHECKPOINT_VERSION,
        "minibatchSourcePosition": min(int(s["minibatchSourcePosition"]) for s in ordered),
        "sweep": first_sweep,
        "cursor": 0,
        "partitioning": None,
        "layers": layers,
        "fingerprint": ordered[0].get("fingerprint"),
        "epoch": int(ordered[0].get("epoch", 0)),
    }
