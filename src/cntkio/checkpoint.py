"""Checkpoint states of a MinibatchSource: the versioned format, its validation, and merging the states
of all partitions for an elastic resume.

A state is a small JSON-serialisable dict: ``version``, CNTK's ``minibatchSourcePosition``, a ``fingerprint``:
the identity of the data by content (:mod:`cntkio.identity`: a copy of the data elsewhere, under other names,
restores) and of the configuration that decides the order, the ``epoch``, the ``cursor`` (sweep, block, positions,
partitioning and the *layers* of earlier partitionings: what each earlier partition had read), for truncated BPTT
the sequences in flight (``bptt_slots``), the error ledgers when errors were counted (``errors``: counts per chunk and
the first located errors, :mod:`cntkio.error_ledger`), and a ``digest`` of all of it. Anything else, anything out of
range, or a state changed by hand is rejected with a ``ConfigError`` (a ``ValueError``) before it can make the source
read other data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .cursor import ALL_CONSUMED
from .error_ledger import check_state as check_ledger
from .error_ledger import merge_states as merge_ledgers
from .errors import ConfigError
from .identity import differences, same

CHECKPOINT_VERSION = 3


def digest(state: Mapping[str, Any]) -> str:
    """A hash of everything a state says (except the digest itself): a state changed by hand or damaged is
    refused instead of restoring somewhere else."""
    content = {key: value for key, value in state.items() if key != "digest"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def seal(state: dict[str, Any]) -> dict[str, Any]:
    """Adds the digest to a state."""
    state["digest"] = digest(state)
    return state


def _integer(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"checkpoint: {what} must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(f"checkpoint: {what} must be >= {low}, got {value}")
    return value


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"checkpoint: {what} must be a dict, got {type(value).__name__}")
    return value


def _partitioning(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"checkpoint: partitioning must be [count, index] or None, got {value!r}")
    count = _integer(value[0], "partition count", 1)
    index = _integer(value[1], "partition index")
    if index >= count:
        raise ConfigError(f"checkpoint: partition index {index} is not below the partition count {count}")
    return [count, index]


def _layers(value: Any) -> dict[str, list[list[Any]]]:
    layers: dict[str, list[list[Any]]] = {}
    for sweep, entries in _mapping(value, "layers").items():
        if not isinstance(sweep, str) or not sweep.isdigit():
            raise ConfigError(f"checkpoint: layer sweeps must be non-negative integers as text, got {sweep!r}")
        if not isinstance(entries, (list, tuple)):
            raise ConfigError("checkpoint: the layers of a sweep must be a list")
        checked = []
        for entry in entries:
            if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], (list, tuple)):
                raise ConfigError(f"checkpoint: a layer must be [count, cursors], got {entry!r}")
            count = _integer(entry[0], "layer partition count", 1)
            cursors = [_integer(c, "layer cursor") for c in entry[1]]
            if len(cursors) != count:
                raise ConfigError(f"checkpoint: a layer of {count} partitions lists {len(cursors)} cursors")
            checked.append([count, cursors])
        layers[str(int(sweep))] = checked
    return layers


def _ledgers(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"checkpoint: errors must be a list of error ledgers, got {type(value).__name__}")
    return value


def _bptt(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    state = _mapping(value, "bptt_slots")

    def rows(key: str, width: int) -> list[list[int]]:
        entries = state.get(key)
        if not isinstance(entries, (list, tuple)):
            raise ConfigError(f"checkpoint: bptt_slots.{key} must be a list")
        result = []
        for entry in entries:
            if not isinstance(entry, (list, tuple)) or len(entry) != width:
                raise ConfigError(f"checkpoint: malformed bptt_slots.{key} entry {entry!r}")
            result.append([_integer(v, f"bptt_slots.{key} value", -1) for v in entry])
        return result

    slots = state.get("slots")
    if not isinstance(slots, (list, tuple)):
        raise ConfigError("checkpoint: bptt_slots.slots must be a list")
    checked_slots = []
    for slot in slots:
        if not isinstance(slot, (list, tuple)):
            raise ConfigError("checkpoint: a BPTT slot must be a list")
        entries = []
        for entry in slot:
            if not isinstance(entry, (list, tuple)) or len(entry) != 3:
                raise ConfigError(f"checkpoint: malformed BPTT slot entry {entry!r}")
            unit, done, length = (_integer(v, "BPTT slot value") for v in entry)
            if done > length:
                raise ConfigError(f"checkpoint: BPTT slot entry {entry!r} delivered more than its length")
            entries.append([unit, done, length])
        checked_slots.append(entries)
    return {"slots": checked_slots, "waiting": rows("waiting", 3)}


def validate(state: Any, fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """Checks a state's structure and types (ranges that depend on the data are checked on restore)
    and returns it normalised; ``fingerprint`` is the identity of the source it is for (:mod:`cntkio.identity`).
    Raises ``ValueError`` naming the first problem (every difference of data or configuration)."""
    state = _mapping(state, "the state")
    if "version" not in state:
        raise ConfigError("checkpoint: no version (CNTK's own {'minibatchSourcePosition': n} has only that key)")
    version = _integer(state["version"], "version", 1)
    if version > CHECKPOINT_VERSION:
        raise ConfigError(f"checkpoint version {version} is newer than this cntkio understands ({CHECKPOINT_VERSION})")
    if version < CHECKPOINT_VERSION:
        raise ConfigError(
            f"checkpoint version {version} comes from an earlier cntkio whose sweep orders or blocks differ; restore "
            "its 'minibatchSourcePosition' alone to continue at the same sample position"
        )
    for key in ("minibatchSourcePosition", "fingerprint", "epoch", "cursor"):
        if key not in state:
            raise ConfigError(f"checkpoint: missing field {key!r}")
    if isinstance(state["fingerprint"], str):
        raise ConfigError(
            "checkpoint: its fingerprint comes from an earlier cntkio that identified the data by file names, sizes "
            "and modification times; restore its 'minibatchSourcePosition' alone to continue at the same sample "
            "position"
        )
    differ = differences(state["fingerprint"], fingerprint)
    if differ:
        raise ConfigError("checkpoint: it was taken with other data or another configuration: " + "; ".join(differ))
    cursor = _mapping(state["cursor"], "cursor")
    for key in ("sweep", "block", "position", "block_position", "block_samples", "partitioning", "layers"):
        if key not in cursor:
            raise ConfigError(f"checkpoint: missing cursor field {key!r}")
    checked = {
        "version": version,
        "minibatchSourcePosition": _integer(state["minibatchSourcePosition"], "minibatchSourcePosition"),
        "fingerprint": state["fingerprint"],
        "epoch": _integer(state["epoch"], "epoch"),
        "cursor": {
            **{
                key: _integer(cursor[key], f"cursor {key}")
                for key in ("sweep", "block", "position", "block_position", "block_samples")
            },
            "partitioning": _partitioning(cursor["partitioning"]),
            "layers": _layers(cursor["layers"]),
        },
        "bptt_slots": _bptt(state.get("bptt_slots")),
        "errors": None if state.get("errors") is None else [check_ledger(s) for s in _ledgers(state["errors"])],
    }
    if state.get("digest") != digest(state):
        raise ConfigError("checkpoint: the state was modified or damaged (its digest does not match its contents)")
    return checked


def merge_checkpoints(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Combines the states of all k partitions into one that restores with any partition count.

    The sequences the k partitions had not read yet are then shared by the new partitions. A state
    taken before its partition read anything carries no partition index: such states fill the
    missing indices in the order given.
    """
    if not states:
        raise ConfigError("no checkpoint states to merge")
    fingerprint = states[0].get("fingerprint") if isinstance(states[0], Mapping) else None
    if not isinstance(fingerprint, Mapping):
        raise ConfigError("merge_checkpoints: the first state has no fingerprint of this cntkio (a dict)")
    for number, state in enumerate(states):
        other = state.get("fingerprint") if isinstance(state, Mapping) else None
        if not same(other, fingerprint):
            differ = "; ".join(differences(other, fingerprint, (f"in state {number}", "in state 0")))
            raise ConfigError(f"merge_checkpoints: the states come from different data or configurations: {differ}")
    checked = [validate(s, fingerprint) for s in states]
    if any(s["bptt_slots"] for s in checked):
        raise ConfigError("truncated BPTT states carry sequences in flight and cannot be merged")
    count = len(checked)
    placed: dict[int, dict[str, Any]] = {}
    unplaced = []
    for state in checked:
        partitioning = state["cursor"]["partitioning"]
        if partitioning is None:
            unplaced.append(state)  # has not read since it was created or restored
        elif partitioning[0] != count or partitioning[1] in placed:
            raise ConfigError("merge_checkpoints needs the state of every partition of one partitioning")
        else:
            placed[partitioning[1]] = state
    free = [index for index in range(count) if index not in placed]
    placed.update(zip(free, unplaced))
    ordered = [placed[index]["cursor"] for index in range(count)]
    earliest = min(checked, key=lambda s: (s["cursor"]["sweep"], s["cursor"]["position"]))
    first = earliest["cursor"]
    # Layers can name later sweeps than any cursor is in (a partition that has not read since a merge).
    last_sweep = max([c["sweep"] for c in ordered] + [int(s) for c in ordered for s in c["layers"]])
    layers: dict[str, list[list[Any]]] = {}
    for sweep in range(first["sweep"], last_sweep + 1):
        # Every partition still in (or before) a sweep carries the same earlier layers of it.
        inherited: list[list[Any]] = next((c["layers"][str(sweep)] for c in ordered if str(sweep) in c["layers"]), [])
        cursors = [
            c["position"] if c["sweep"] == sweep else (ALL_CONSUMED if c["sweep"] > sweep else 0) for c in ordered
        ]
        layers[str(sweep)] = [*inherited, [count, cursors]]
    merged = {
        "version": CHECKPOINT_VERSION,
        "minibatchSourcePosition": earliest["minibatchSourcePosition"],
        "fingerprint": earliest["fingerprint"],
        "epoch": earliest["epoch"],
        "cursor": {**first, "partitioning": None, "layers": layers},
    }
    ledgers = [s["errors"] for s in checked if s["errors"] is not None]  # each deserializer's, in order
    if ledgers:
        if len({len(ledger) for ledger in ledgers}) != 1:
            raise ConfigError("merge_checkpoints: the states list different numbers of error ledgers")
        merged["errors"] = [merge_ledgers(same_ledger) for same_ledger in zip(*ledgers)]
    return seal(merged)
