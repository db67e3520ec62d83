"""Joining deserializers by sequence key (CNTK's Bundler, with the mismatches counted and reported).

The first deserializer (the primary) decides the sequences and their order; every other one (a
secondary) is looked up by key. A primary sequence whose key a secondary lacks is dropped. Keys
compare as CNTK compared them (:func:`cntkio._src.common.keys.comparable`); the join is a native hash table, so
building it costs a few bytes per key and no Python object per key.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cntkio._src.common.arrays import narrow_lengths
from cntkio._src.common.errors import ConfigError
from cntkio._src.common.keys import KeyColumn, comparable, duplicate_keys, join_keys, shorten
from cntkio._src.formats.protocol import Deserializer

logger = logging.getLogger("cntkio")

EXAMPLES = 5  # keys named per problem in reports and errors


class LengthMismatch(str, enum.Enum):
    """What to do with a sequence whose deserializers hold different numbers of samples (features vs
    labels). Deserializers with exactly one sample in every sequence (a class label, an image) hold
    per-sequence data and never mismatch.

    * ``pad`` (default, CNTK's behaviour): the sequence is as long as its longest deserializer (or its
      ``defines_mb_size`` stream); each stream keeps its own samples, the shorter ones are padded in
      padded views and masks.
    * ``truncate``: every stream is cut to the shortest of those deserializers.
    * ``drop``: the sequence is dropped (counted with the other drops).
    * ``error``: a mismatch is an error naming the keys.
    """

    PAD = "pad"
    TRUNCATE = "truncate"
    DROP = "drop"
    ERROR = "error"

    @staticmethod
    def parse(value: LengthMismatch | str) -> LengthMismatch:
        try:
            return LengthMismatch(value)
        except ValueError:
            choices = ", ".join(repr(p.value) for p in LengthMismatch)
            raise ConfigError(f"length_mismatch must be one of {choices}, got {value!r}") from None


@dataclass(frozen=True)
class KeyProblems:
    """How many sequences have one kind of key problem in one deserializer, and the first few keys."""

    count: int = 0
    keys: tuple[Any, ...] = ()

    def __bool__(self) -> bool:
        return self.count > 0

    def describe(self, what: str) -> str:
        shown = ", ".join(shorten(k) for k in self.keys)
        more = f" and {self.count - len(self.keys)} more" if self.count > len(self.keys) else ""
        return f"{what}: {self.count} ({shown}{more})"


@dataclass(frozen=True)
class DeserializerJoin:
    """One deserializer's part in the join. ``missing``: primary keys it lacks (those sequences are
    dropped; always empty for the primary); ``duplicates``: extra copies of a key it holds;
    ``length_mismatches``: joined sequences whose length here differs from the others'."""

    source: str
    copy_used: str = "first"  # of a duplicate key
    missing: KeyProblems = KeyProblems()
    duplicates: KeyProblems = KeyProblems()
    length_mismatches: KeyProblems = KeyProblems()


@dataclass(frozen=True)
class JoinReport:
    """What joining the deserializers found (``MinibatchSource.join_report``); ``str()`` describes it."""

    sequences: int  # primary sequences considered (in the data slice)
    dropped: int  # of them, dropped because a secondary lacks their key
    length_mismatch: LengthMismatch
    deserializers: tuple[DeserializerJoin, ...] = field(default_factory=tuple)

    @property
    def clean(self) -> bool:
        return not self.dropped and not any(d.duplicates or d.length_mismatches for d in self.deserializers)

    def __str__(self) -> str:
        lines = [f"joined {len(self.deserializers)} deserializers by key: {self.sequences - self.dropped} of "
                 f"{self.sequences} sequences kept, {self.dropped} dropped"]  # fmt: skip
        for number, d in enumerate(self.deserializers):
            copies = "every copy read, joined to the same data" if number == 0 else f"the {d.copy_used} copy used"
            problems = [
                p.describe(what)
                for p, what in (
                    (d.missing, "keys of the primary missing, sequences dropped"),
                    (d.duplicates, f"duplicate keys, {copies}"),
                    (d.length_mismatches, f"sequences of another length, policy {self.length_mismatch.value!r}"),
                )
                if p
            ]
            if problems:
                lines.append(f"  {d.source}: " + "; ".join(problems))
        return "\n".join(lines)


@dataclass(frozen=True)
class Join:
    """The joined sequences: primary sequences ``kept`` (None: all of the slice), for each secondary the
    sequence joined to each kept one (``matches[d - 1]``), and the length of each kept sequence."""

    kept: np.ndarray | None
    matches: list[np.ndarray]
    lengths: np.ndarray
    caps: np.ndarray | None  # truncate: the most samples any stream of each kept sequence delivers
    report: JoinReport


def _examples(keys: KeyColumn, rows: np.ndarray) -> tuple[Any, ...]:
    return tuple(keys.take(np.asarray(rows[:EXAMPLES], dtype=np.int64)))


def _keeps_last(deserializer: Deserializer) -> bool:
    copy = deserializer.duplicate_key_copy
    if copy not in ("first", "last"):
        raise ConfigError(f"{deserializer.source_name}: duplicate_key_copy must be 'first' or 'last', got {copy!r}")
    return copy == "last"


def _defining(deserializers: Sequence[Deserializer]) -> int | None:
    """The deserializer with a ``defines_mb_size`` stream, if any (more than one is an error)."""
    defining = [d for d, x in enumerate(deserializers) if any(i.defines_mb_size for i in x.stream_infos())]
    if len(defining) > 1:
        names = ", ".join(deserializers[d].source_name for d in defining)
        raise ConfigError(f"more than one deserializer has a stream with defines_mb_size=True ({names})")
    return defining[0] if defining else None


def join(
    deserializers: Sequence[Deserializer],
    first: int,
    stop: int,
    *,
    strict: bool = False,
    length_mismatch: LengthMismatch | str = LengthMismatch.PAD,
) -> Join:
    """Joins the secondaries to primary sequences ``[first, stop)``. ``strict``: a missing or duplicate
    key is an error naming the key and the file."""
    policy = LengthMismatch.parse(length_mismatch)
    primary, secondaries = deserializers[0], deserializers[1:]
    defining = _defining(deserializers)
    primary_index = primary.sequence_index()
    primary_keys = primary_index.keys.slice(first, stop)
    indexes = [d.sequence_index() for d in secondaries]
    columns, by_text = comparable([primary_keys, *(index.keys for index in indexes)])
    count = stop - first
    found = np.ones(count, dtype=bool)
    joins = []
    for deserializer, column in zip(secondaries, columns[1:]):
        joined = join_keys(columns[0], column, by_text, keep_last=_keeps_last(deserializer))
        found &= joined.match >= 0
        joins.append(joined)
    reports = []
    primary_duplicates, rows = duplicate_keys(columns[0], by_text)
    reports.append(
        DeserializerJoin(primary.source_name, duplicates=KeyProblems(primary_duplicates, _examples(primary_keys, rows)))
    )
    for deserializer, index, joined in zip(secondaries, indexes, joins):
        missing = np.flatnonzero(joined.match < 0)
        reports.append(
            DeserializerJoin(
                deserializer.source_name,
                deserializer.duplicate_key_copy,
                missing=KeyProblems(len(missing), _examples(primary_keys, missing)),
                duplicates=KeyProblems(joined.duplicates, _examples(index.keys, joined.duplicate_rows)),
            )
        )
    if strict:
        _refuse_key_problems(reports, primary.source_name)
    kept_rows = None if bool(found.all()) else np.flatnonzero(found)
    matches = [j.match if kept_rows is None else j.match[kept_rows] for j in joins]
    if kept_rows is not None and not len(kept_rows):
        raise ConfigError(
            "Could not reconcile data between different deserializers. Keys of logical sequences do not match: "
            f"no key of {primary.source_name} is found in every other deserializer"
        )
    del found, joins
    own_lengths = [primary_index.lengths[first:stop] if kept_rows is None else primary_index.lengths[first + kept_rows]]
    own_lengths += [index.lengths[match] for index, match in zip(indexes, matches)]
    lengths, caps, mismatches = _combine_lengths(own_lengths, defining, policy)
    for number, rows in mismatches.items():
        primary_rows = rows if kept_rows is None else kept_rows[rows[:EXAMPLES]]
        reports[number] = _with_mismatches(
            reports[number], KeyProblems(len(rows), _examples(primary_keys, primary_rows))
        )
    if policy is LengthMismatch.DROP and mismatches:
        keep = np.ones(len(lengths), dtype=bool)
        for rows in mismatches.values():
            keep[rows] = False
        if not keep.any():
            raise ConfigError("length_mismatch='drop' left no sequence: every joined sequence's lengths differ")
        kept_rows = np.flatnonzero(keep) if kept_rows is None else kept_rows[keep]
        matches = [match[keep] for match in matches]
        lengths = lengths[keep]
    kept_count = count if kept_rows is None else len(kept_rows)
    report = JoinReport(count, count - kept_count, policy, tuple(reports))
    if policy is LengthMismatch.ERROR and mismatches:
        raise ConfigError(f"sequence lengths differ between deserializers (length_mismatch='error'):\n{report}")
    if not report.clean:
        logger.warning("%s", report)
    kept = None if kept_rows is None else kept_rows + first
    return Join(kept, matches, lengths, caps, report)


def _with_mismatches(report: DeserializerJoin, problems: KeyProblems) -> DeserializerJoin:
    return dataclasses.replace(report, length_mismatches=problems)


def _refuse_key_problems(reports: list[DeserializerJoin], primary: str) -> None:
    for report in reports:
        if report.missing:
            raise ConfigError(
                f"strict: key {shorten(report.missing.keys[0])} of {primary} is missing in {report.source} "
                f"({report.missing.describe('keys missing')})"
            )
        if report.duplicates:
            raise ConfigError(
                f"strict: key {shorten(report.duplicates.keys[0])} occurs more than once in {report.source} "
                f"({report.duplicates.describe('duplicate keys')})"
            )


def _combine_lengths(
    lengths: list[np.ndarray], defining: int | None, policy: LengthMismatch
) -> tuple[np.ndarray, np.ndarray | None, dict[int, np.ndarray]]:
    """Each kept sequence's length, the truncation caps, and per deserializer the rows whose length
    differs from the reference (the first deserializer holding more than one sample somewhere)."""
    carrying = [d for d, x in enumerate(lengths) if len(x) and int(x.max()) > 1]
    mismatches: dict[int, np.ndarray] = {}
    if carrying:
        reference = lengths[carrying[0]]
        for d in carrying[1:]:
            rows = np.flatnonzero(lengths[d] != reference)
            if len(rows):
                mismatches[d] = rows
    if policy is LengthMismatch.TRUNCATE and mismatches:
        shortest = _elementwise(np.minimum, [lengths[d] for d in carrying])
        counted = shortest if defining is None else narrow_lengths(np.minimum(lengths[defining], shortest))
        return counted, shortest.astype(np.int64), mismatches
    if defining is not None:
        return narrow_lengths(lengths[defining]), None, mismatches
    return _elementwise(np.maximum, lengths), None, mismatches


def _elementwise(function: np.ufunc, arrays: list[np.ndarray]) -> np.ndarray:
    """``function`` over the arrays element by element, in one output array (no stacked copy)."""
    fits = all(not len(a) or int(a.max()) < 2**31 for a in arrays)
    result = arrays[0].astype(np.int32 if fits else np.int64)
    for other in arrays[1:]:
        function(result, other, out=result, casting="unsafe")  # safe: every value fits the result's type
    return result
