"""Checkpoint states of a MinibatchSource: the versioned format, its validation, and merging the states
of all partitions for an elastic resume.

A state is a small JSON-serialisable dict: ``version``, CNTK's ``minibatchSourcePosition``, a ``fingerprint``:
the identity of the data by content (:mod:`cntkio._src.formats.identity`: a copy of the data elsewhere, under other
names,
restores) and of the configuration that decides the order, the ``epoch``, the ``cursor`` (sweep, block, positions,
partitioning and the *layers* of earlier partitionings: what each earlier partition had read), for truncated BPTT
the sequences in flight (``bptt_slots``), the error ledgers when errors were counted (``errors``: counts per chunk and
the first located errors, :mod:`cntkio._src.formats.error_ledger`), and a ``digest`` of all of it. Anything else,
anything out of
range, or a state changed by hand is rejected with a ``ConfigError`` (a ``ValueError``) before it can make the source
read other data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cntkio._src.common.errors import ConfigError
from cntkio._src.formats.error_ledger import check_state as check_ledger
from cntkio._src.formats.error_ledger import merge_states as merge_ledgers
from cntkio._src.formats.identity import differences, same
from cntkio._src.reading.bptt import BpttSlots
from cntkio._src.reading.cursor import ALL_CONSUMED

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


class PendingCheckpoint:
    """A source's position as taken right after a minibatch, the checkpoint built (fingerprint added, sealed) only
    when :meth:`state` is first called: taking one costs a few microseconds, so every minibatch can carry its own.
    It pickles small (the position's entries and the fingerprint's JSON text)."""

    __slots__ = ("_entries", "_identity", "_state")

    def __init__(self, entries: dict[str, Any], identity: str):
        self._entries = entries  # the engine's state (a fresh dict), and the error ledgers when errors were counted
        self._identity = identity  # the source's fingerprint as JSON text
        self._state: dict[str, Any] | None = None

    def state(self) -> dict[str, Any]:
        """The checkpoint (``MinibatchSource.get_checkpoint_state``'s dict); a new copy on every call."""
        if self._state is None:
            entries = dict(self._entries)
            self._state = seal({
                "version": CHECKPOINT_VERSION,
                "minibatchSourcePosition": entries.pop("minibatchSourcePosition"),
                "fingerprint": json.loads(self._identity),
                **entries,
            })  # fmt: skip
        copy: dict[str, Any] = json.loads(json.dumps(self._state))
        return copy

    def __getstate__(self) -> tuple[dict[str, Any], str]:
        return self._entries, self._identity

    def __setstate__(self, state: tuple[dict[str, Any], str]) -> None:
        self._entries, self._identity = state
        self._state = None


INTEGER_LIMIT = ALL_CONSUMED  # no count or position of a state reaches it (but a layer cursor may be exactly it)
MAX_SWEEP_SPREAD = 10_000  # the most sweeps the partitions of one merge may lie apart
MAX_PARTITIONS = 1 << 20  # the most partitions a state may name (a change of partitioning lists each one's cursor)


def _integer(value: Any, what: str, low: int = 0, high: int = INTEGER_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"checkpoint: {what} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"checkpoint: {what} is {value}; allowed [{low}, {high}]")
    return value


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"checkpoint: {what} must be a dict, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"checkpoint: {what} must be a list, got {type(value).__name__}")
    return value


def _partitioning(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"checkpoint: cursor.partitioning must be [count, index] or None, got {value!r}")
    count = _integer(value[0], "cursor.partitioning count", 1, MAX_PARTITIONS)
    index = _integer(value[1], "cursor.partitioning index", 0, count - 1)
    return [count, index]


def _layers(value: Any, sweep: int) -> dict[str, list[list[Any]]]:
    """The layers of earlier partitionings: they name the cursor's sweep and the sweeps right after it (one
    per sweep at most), each a list of [partition count, the cursor of every partition]."""
    layers: dict[str, list[list[Any]]] = {}
    entries_of = _mapping(value, "cursor.layers")
    last = sweep + len(entries_of) - 1
    for key, entries in entries_of.items():
        if not isinstance(key, str) or not key.isdigit() or not sweep <= int(key) <= last:
            raise ConfigError(
                f"checkpoint: cursor.layers names sweep {key!r}; allowed: sweeps [{sweep}, {last}] as text "
                f"(the cursor's sweep {sweep} and the next ones, one per layer entry)"
            )
        checked = []
        for entry in _list(entries, f"cursor.layers[{key}]"):
            if not isinstance(entry, (list, tuple)) or len(entry) != 2 or not isinstance(entry[1], (list, tuple)):
                raise ConfigError(f"checkpoint: a layer of cursor.layers[{key}] must be [count, cursors]: {entry!r}")
            count = _integer(entry[0], f"a partition count of cursor.layers[{key}]", 1)
            if len(entry[1]) != count:
                raise ConfigError(
                    f"checkpoint: a layer of cursor.layers[{key}] of {count} partitions lists {len(entry[1])} cursors"
                )
            cursors = [_integer(c, f"a cursor of cursor.layers[{key}]", 0, ALL_CONSUMED) for c in entry[1]]
            checked.append([count, cursors])
        layers[str(int(key))] = checked
    return layers


def _bptt(value: Any) -> dict[str, Any] | None:
    """Structure and corpus-free ranges of ``bptt_slots`` (units and lengths are checked against the data on
    restore, :func:`cntkio._src.reading.bptt.check_in_flight`)."""
    if value is None:
        return None
    state = _mapping(value, "bptt_slots")

    def rows(entries: Any, key: str, width: int) -> list[list[int]]:
        result = []
        for entry in _list(entries, f"bptt_slots.{key}"):
            if not isinstance(entry, (list, tuple)) or len(entry) != width:
                raise ConfigError(f"checkpoint: a bptt_slots.{key} entry must be a list of {width} integers: {entry!r}")
            result.append([_integer(v, f"a bptt_slots.{key} value", -1) for v in entry])
        return result

    for key in ("slots", "waiting", "carried", "merged"):
        if key not in state:
            raise ConfigError(f"checkpoint: missing field bptt_slots.{key}")
    return {
        "slots": [rows(slot, "slots[]", 3) for slot in _list(state["slots"], "bptt_slots.slots")],
        "waiting": rows(state["waiting"], "waiting", 3),
        "carried": rows(state["carried"], "carried", 4),
        "merged": None if state["merged"] is None else rows(state["merged"], "merged", 4),
    }


def validate(state: Any, fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """Checks a state's structure and types (ranges that depend on the data are checked on restore)
    and returns it normalised; ``fingerprint`` is the identity of the source it is for
    (:mod:`cntkio._src.formats.identity`).
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
    position = _integer(state["minibatchSourcePosition"], "minibatchSourcePosition")
    numbers = {
        key: _integer(cursor[key], f"cursor.{key}") for key in ("block", "position", "block_position", "block_samples")
    }
    # A sweep holds a sample at least: the cursor's sweep is at most its sample position.
    sweep = _integer(cursor["sweep"], "cursor.sweep", 0, position)
    if numbers["block_position"] > numbers["position"]:
        raise ConfigError(
            f"checkpoint: cursor.position {numbers['position']} lies before its block's start "
            f"(cursor.block_position {numbers['block_position']})"
        )
    checked = {
        "version": version,
        "minibatchSourcePosition": position,
        "fingerprint": state["fingerprint"],
        "epoch": _integer(state["epoch"], "epoch"),
        "cursor": {
            "sweep": sweep,
            **numbers,
            "partitioning": _partitioning(cursor["partitioning"]),
            "layers": _layers(cursor["layers"], sweep),
        },
        "bptt_slots": _bptt(state.get("bptt_slots")),
        "errors": None if state.get("errors") is None else [check_ledger(s) for s in _list(state["errors"], "errors")],
    }
    if state.get("digest") != digest(state):
        raise ConfigError("checkpoint: the state was modified or damaged (its digest does not match its contents)")
    return checked


def merge_checkpoints(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Combines the states of all k partitions into one that restores with any partition count.

    The sequences the k partitions had not read yet are then shared by the new partitions. A state
    taken before its partition read anything (since it was made, or restored from a merged state) carries no
    partition index: such states fill the missing indices in the order given. With truncated BPTT, the sequences
    each partition had in flight are carried over: the new partitions share them out at their first read and
    deliver each from where it stopped, before any sequence not read yet.
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
    count = len(checked)
    placed: dict[int, dict[str, Any]] = {}
    unplaced = []
    for state in checked:
        partitioning = state["cursor"]["partitioning"]
        if partitioning is None:
            unplaced.append(state)  # has not read since it was created or restored
        elif partitioning[0] != count or partitioning[1] in placed:
            raise ConfigError(
                f"merge_checkpoints needs the state of every partition of one partitioning: {count} states given, "
                f"one of them is partition {partitioning[1]} of {partitioning[0]}"
                + (" (given twice)" if partitioning[1] in placed else "")
            )
        else:
            placed[partitioning[1]] = state
    free = [index for index in range(count) if index not in placed]
    placed.update(zip(free, unplaced))
    ordered = [placed[index]["cursor"] for index in range(count)]
    earliest = min(checked, key=lambda s: (s["cursor"]["sweep"], s["cursor"]["position"]))
    first = earliest["cursor"]
    # Layers can name later sweeps than any cursor is in (a partition that has not read since a merge).
    last_sweep = max([c["sweep"] for c in ordered] + [int(s) for c in ordered for s in c["layers"]])
    if last_sweep - first["sweep"] > MAX_SWEEP_SPREAD:
        raise ConfigError(
            f"merge_checkpoints: the partitions lie {last_sweep - first['sweep']} sweeps apart (sweeps "
            f"{first['sweep']} to {last_sweep}); allowed at most {MAX_SWEEP_SPREAD}"
        )
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
    slots = [placed[index]["bptt_slots"] for index in range(count)]
    if any(s is not None for s in slots):
        if any(s is None for s in slots):
            raise ConfigError("merge_checkpoints: some states are of truncated BPTT and some are not")
        merged["bptt_slots"] = {"slots": [], "waiting": [], "carried": [], "merged": _in_flight(slots)}
    ledgers = [s["errors"] for s in checked if s["errors"] is not None]  # each deserializer's, in order
    if ledgers:
        if len({len(ledger) for ledger in ledgers}) != 1:
            raise ConfigError("merge_checkpoints: the states list different numbers of error ledgers")
        merged["errors"] = [merge_ledgers(same_ledger) for same_ledger in zip(*ledgers)]
    return seal(merged)


def _in_flight(states: list[dict[str, Any]]) -> list[list[int]]:
    """The pieces the partitions (in index order) have in flight: each state's slots, carried and waiting
    sequences; of a state restored from an earlier merge that has not read since, its share of that merge's."""
    shared = [s["merged"] for s in states if s.get("merged") is not None]
    if any(pieces != shared[0] for pieces in shared):
        raise ConfigError("merge_checkpoints: states restored from different merged states")
    pieces: list[list[int]] = []
    for index, state in enumerate(states):
        slots = BpttSlots(0)
        slots.set_state(state)
        owed = slots.in_flight()
        pieces += owed[index :: len(states)] if slots.merged is not None else owed
    return pieces
