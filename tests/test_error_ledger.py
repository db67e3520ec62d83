"""The error ledger (cntkio.error_ledger): bad records counted from native arrays, reported by the source (counts by
kind and file, the first located errors, every error as columns), kept across a checkpoint and restore without
counting a chunk twice, merged across partitions, the bad records' raw lines in a quarantine file, and only the
first few logged."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cntkio import ConfigError, CTFDeserializer, MaxErrorsExceeded, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.formats.error_ledger import RECORDED, SHOWN

AB = StreamDefs(a=StreamDef(field="a", shape=2), b=StreamDef(field="b", shape=5, is_sparse=True))


def dirty(path: Path, n: int, bad: set[int]) -> Path:
    """Sequences 0..n-1 of one line; those in ``bad`` hold a malformed number (one error each, the sequence
    dropped); sequence 1 lacks its sparse input when 1 is in ``bad`` too (an index error)."""
    lines = []
    for i in range(n):
        if i in bad and i == 1:
            lines.append(f"{i} |a {i} 0\n")  # no |b: the index drops it (missing input)
        elif i in bad:
            lines.append(f"{i} |a {i} x{i} |b 1:1\n")
        else:
            lines.append(f"{i} |a {i} 0 |b 1:1\n")
    path.write_text("".join(lines))
    return path


def source_over(path: Path, max_errors: int = 1000, chunk: int = 200, **options: object) -> MinibatchSource:
    reader = CTFDeserializer(path, AB, max_errors=max_errors, chunk_size_in_bytes=chunk, trace_level=0)
    return MinibatchSource(reader, randomization_window_in_chunks=4, **options)  # type: ignore[arg-type]


def drain(source: MinibatchSource, size: int = 16) -> list[int]:
    keys: list[int] = []
    while minibatch := source.next_minibatch(size):
        keys += [int(key) for _, key in minibatch.provenance.keys]
    return keys


def test_the_report_counts_by_kind_and_file_and_locates_the_first(tmp_path: Path) -> None:
    path = dirty(tmp_path / "d.ctf", 200, {1, *range(5, 200, 7)})
    source = source_over(path, max_sweeps=1)
    keys = drain(source)
    bad = {1, *range(5, 200, 7)}
    assert set(keys) >= set(range(200)) - bad and 1 not in keys  # (the index dropped sequence 1)
    report = source.error_report(limit=5)
    assert report.total == len(bad)
    assert report.by_kind == {"missing input": 1, "bad number": len(bad) - 1}
    assert report.by_file == {str(path): len(bad)}
    assert len(report.errors) == 5 and report.arrays is None
    first = report.errors[0]  # the index's error comes first: counted when the file was indexed
    assert (first.file, first.line, first.sequence_key, first.input) == (str(path), 2, 1, "b")
    assert "malformed number" in report.errors[1].reason and "x" in report.errors[1].reason
    columns = source.error_report(arrays=True).arrays
    assert columns is not None and columns.files == [str(path)]
    assert sorted(columns.line.tolist()) == sorted(k + 1 for k in bad)
    assert sorted(np.asarray(columns.kinds)[columns.kind].tolist()) == sorted(
        ["missing input"] + ["bad number"] * (len(bad) - 1)
    )
    parse_errors = columns.sequence >= 0
    assert {int(k) for k in source.deserializers[0].sequence_index().keys.take(columns.sequence[parse_errors])} == (
        bad - {1}
    )
    assert f"{len(bad)} bad record(s) counted" in str(report)


def test_a_restored_source_does_not_count_a_chunk_again(tmp_path: Path) -> None:
    bad = set(range(3, 400, 5))
    path = dirty(tmp_path / "d.ctf", 400, bad)
    whole = source_over(path, max_sweeps=2)
    drain(whole)
    assert whole.error_report().total == len(bad)  # two sweeps, each bad record counted once
    for stop in (0, 3, 11):
        source = source_over(path, max_sweeps=2)
        for _ in range(stop):
            source.next_minibatch(16)
        state = json.loads(json.dumps(source.get_checkpoint_state()))
        # (prefetching threads may count the errors of chunks ahead after the state was taken: the state's ledger
        # is what restores, and chunks it does not name are counted when they are parsed again)
        ledgers = state.get("errors", [])
        counted = sum(n for ledger in ledgers for *_, n in ledger["counts"])
        assert counted or stop == 0
        if counted:  # one ledger, bounded; a state taken before any error was counted has none
            assert len(ledgers) == 1 and len(ledgers[0]["recorded"]) == min(counted, RECORDED)
        restored = source_over(path, max_sweeps=2)
        restored.restore_from_checkpoint(state)
        assert restored.error_report().total == counted
        recorded = [(row[1], row[6]) for ledger in ledgers for row in ledger["recorded"]]
        assert [(e.offset, e.reason) for e in restored.error_report(limit=RECORDED).errors] == recorded
        drain(restored)
        assert restored.error_report().total == len(bad)


def test_max_errors_still_stops_at_the_record_past_it_after_a_restore(tmp_path: Path) -> None:
    """(Without prefetch: with it, chunks are parsed, and their errors counted, in the order parses finish.)"""
    path = dirty(tmp_path / "d.ctf", 300, set(range(2, 300, 3)))
    source = source_over(path, max_errors=40, randomize=False, max_sweeps=1, prefetch=False)
    with pytest.raises(MaxErrorsExceeded) as error:
        drain(source)
    assert error.value.max_errors == 40 and error.value.sequence_key == 2 + 3 * 40  # the 41st bad record
    source = source_over(path, max_errors=40, randomize=False, max_sweeps=1, prefetch=False)
    source.next_minibatch(30)
    state = source.get_checkpoint_state()
    restored = source_over(path, max_errors=40, randomize=False, max_sweeps=1, prefetch=False)
    restored.restore_from_checkpoint(state)
    with pytest.raises(MaxErrorsExceeded) as error:
        drain(restored)
    assert error.value.sequence_key == 2 + 3 * 40
    tighter = source_over(path, max_errors=1, randomize=False, max_sweeps=1)
    with pytest.raises(ConfigError, match="more than max_errors=1"):
        tighter.restore_from_checkpoint(state)


def test_a_tampered_ledger_is_refused(tmp_path: Path) -> None:
    from cntkio._src.reading.checkpoint import seal

    path = dirty(tmp_path / "d.ctf", 100, {7, 8})
    source = source_over(path, max_sweeps=1)
    drain(source)
    state = source.get_checkpoint_state()
    for change, message in (
        (lambda s: s["errors"][0]["counts"][0].__setitem__(0, 10**6), "chunk outside"),
        (lambda s: s["errors"][0]["counts"][0].__setitem__(3, -1), "malformed error ledger"),
        (lambda s: s["errors"][0].__setitem__("recorded", "x"), "malformed error ledger"),
        (lambda s: s["errors"].append(s["errors"][0]), "holds 2 error ledgers"),
    ):
        edited = json.loads(json.dumps(state))
        change(edited)
        with pytest.raises(ConfigError, match=message):
            source_over(path, max_sweeps=1).restore_from_checkpoint(seal(edited))


def test_merged_partitions_count_each_chunk_once(tmp_path: Path) -> None:
    bad = set(range(4, 500, 9))
    path = dirty(tmp_path / "d.ctf", 500, bad)
    states = []
    for index in range(3):
        source = source_over(path, max_sweeps=1)
        for _ in range(6):
            source.next_minibatch(30, num_data_partitions=3, partition_index=index)
        states.append(source.get_checkpoint_state())
    merged = MinibatchSource.merge_checkpoints(states)
    restored = source_over(path, max_sweeps=1)
    restored.restore_from_checkpoint(merged)
    counted = restored.error_report().total
    assert 0 < counted <= len(bad)
    drain(restored)
    assert restored.error_report().total == len(bad)


def test_the_quarantine_file_holds_each_bad_record_once(tmp_path: Path) -> None:
    bad = {1, 4, 9, 33}
    path = dirty(tmp_path / "d.ctf", 40, bad)
    quarantine = tmp_path / "bad.ctf"
    reader = CTFDeserializer(path, AB, max_errors=10, chunk_size_in_bytes=64, quarantine_file=quarantine)
    drain(MinibatchSource(reader, max_sweeps=3))
    lines = path.read_text().splitlines(keepends=True)
    assert sorted(quarantine.read_text().splitlines(keepends=True)) == sorted(lines[k] for k in bad)


def test_only_the_first_errors_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = dirty(tmp_path / "d.ctf", 100, set(range(2, 100, 4)))
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        reader = CTFDeserializer(path, AB, max_errors=100, chunk_size_in_bytes=100)
        drain(MinibatchSource(reader, max_sweeps=1))
    shown = [r for r in caplog.records if "skipped bad record" in r.getMessage()]
    assert len(shown) == SHOWN and reader.errors.count == 25
    assert len([r for r in caplog.records if f"more than {SHOWN} bad records" in r.getMessage()]) == 1
    assert len(reader.errors.errors) == 25  # every one, on request


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    bad=st.sets(st.integers(0, 119), max_size=40),
    chunk=st.integers(30, 400),
    stops=st.lists(st.integers(1, 12), min_size=1, max_size=3),
)
def test_restores_anywhere_count_each_bad_record_once(
    tmp_path: Path, bad: set[int], chunk: int, stops: list[int]
) -> None:
    path = dirty(tmp_path / "p.ctf", 120, bad)
    state = None
    for stop in stops:  # read a little, checkpoint, continue in a new source from the state
        source = source_over(path, chunk=chunk, max_sweeps=3)
        if state is not None:
            source.restore_from_checkpoint(state)
        for _ in range(stop):
            source.next_minibatch(13)
        state = json.loads(json.dumps(source.get_checkpoint_state()))
    source = source_over(path, chunk=chunk, max_sweeps=3)
    source.restore_from_checkpoint(state)
    drain(source, 13)
    report = source.error_report(limit=200)
    assert report.total == len(bad)
    assert sum(report.by_kind.values()) == len(bad)


def test_counting_builds_no_error_object_beyond_those_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted errors stay arrays: a sweep over thousands of bad records builds a FormatError (message, key lookup)
    only for the few logged at trace_level 1, none per error counted."""
    import cntkio._src.common.errors as errors

    built = []
    original = errors.FormatError.__init__

    def counting(self: errors.FormatError, *args: object, **kwargs: object) -> None:
        built.append(1)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(errors.FormatError, "__init__", counting)
    path = dirty(tmp_path / "d.ctf", 5000, {1, *range(2, 5000, 2)})
    reader = CTFDeserializer(path, AB, max_errors=10_000, chunk_size_in_bytes=4096)
    drain(MinibatchSource(reader, max_sweeps=2))
    assert reader.errors.count == 2500
    assert len(built) <= SHOWN


def test_format_errors_cross_process_boundaries() -> None:
    """A FormatError raised in a DataLoader worker or a Ray task is pickled to the caller: it arrives whole (it could
    not be unpickled: TypeError, a missing location)."""
    import pickle

    from cntkio import FormatError, Location, MaxErrorsExceeded

    error = FormatError("bad value", Location("data.ctf", 10, 2, 3, sequence_key=7, input="x"))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is FormatError and str(again) == str(error)
    assert (again.file, again.line, again.column, again.sequence_key, again.input) == ("data.ctf", 2, 3, 7, "x")
    exceeded = pickle.loads(pickle.dumps(MaxErrorsExceeded(error, 3)))
    assert type(exceeded) is MaxErrorsExceeded and exceeded.max_errors == 3 and exceeded.first_error.line == 2
