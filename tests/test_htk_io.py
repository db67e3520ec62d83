"""HTK feature files (header, endianness, compression, GUID) and SCP files (every rule of spec §1.2)."""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

from cntkio._src.common.errors import FormatError
from cntkio._src.formats.scp import parse_scp
from cntkio.htk import (
    HTK_KINDS,
    HTK_QUALIFIERS,
    ScpEntry,
    parm_kind,
    read_features,
    read_header,
    write_archive,
    write_features,
    write_scp,
)


def bits(values: np.ndarray) -> list[int]:
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).ravel().tolist()


def frames(count: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)


def header_bytes(samples: int, period: int, size: int, kind: int, order: str = ">") -> bytes:
    return struct.pack(order + "iiHH", samples, period, size, kind)


# ------------------------------------------------------------------------------------- HTK files
def test_constants_follow_the_spec():
    assert HTK_KINDS == {"MFCC": 6, "FBANK": 7, "USER": 9, "PLP": 11, "ANON": 12}
    assert [HTK_QUALIFIERS[q] for q in ("_E", "_N", "_D", "_A", "_C", "_Z", "_K", "_0", "_V", "_T")] == [
        0o100, 0o200, 0o400, 0o1000, 0o2000, 0o4000, 0o10000, 0o20000, 0o40000, 0o100000,
    ]  # fmt: skip
    assert parm_kind("MFCC", "_E_D_A") == 6 | 0o100 | 0o400 | 0o1000


@pytest.mark.parametrize("big_endian", [True, False])
def test_float_round_trip_is_bit_identical_in_both_byte_orders(tmp_path, big_endian):
    data = frames(37, 13)
    data[0, 0], data[1, 1] = -0.0, np.float32(1e-42)  # signed zero and a subnormal survive
    path = tmp_path / "a.mfc"
    written = write_features(path, data, kind="MFCC", qualifiers="_E_D", big_endian=big_endian, sample_period=50000)
    header = read_header(path)
    assert header == written
    assert (header.frames, header.sample_period, header.sample_size, header.dim) == (37, 50000, 52, 13)
    assert (header.base_kind, header.qualifiers, header.compressed) == ("MFCC", "_E_D", False)
    assert header.byte_order == (">" if big_endian else "<") and header.big_endian is big_endian
    assert path.stat().st_size == 12 + 37 * 52
    assert bits(read_features(path)) == bits(data)
    assert bits(read_features(path, 5, 9)) == bits(data[5:10])
    assert read_header(path.read_bytes()[:12]) == header


def test_big_endian_is_htk_layout_byte_for_byte(tmp_path):
    path = tmp_path / "a.fb"
    write_features(path, np.array([[1.0, -2.0]], dtype=np.float32), kind="FBANK")
    assert path.read_bytes() == header_bytes(1, 100000, 8, 7) + struct.pack(">ff", 1.0, -2.0)


def test_little_endian_file_written_by_hand_reads(tmp_path):
    path = tmp_path / "le.htk"
    path.write_bytes(header_bytes(2, 100000, 8, 9, "<") + struct.pack("<4f", 1, 2, 3, 4))
    header = read_header(path)
    assert not header.big_endian and header.base_kind == "USER"
    assert read_features(path).tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("big_endian", [True, False])
def test_compressed_round_trip_within_the_quantisation_step(tmp_path, big_endian):
    data = frames(200, 8) * np.arange(1, 9, dtype=np.float32) + 3
    data[:, 5] = 2.5  # a constant dimension is stored exactly
    path = tmp_path / "c.mfc"
    header = write_features(path, data, kind="MFCC", qualifiers="_E", compressed=True, big_endian=big_endian)
    assert header.compressed and header.qualifiers == "_E_C" and header.sample_size == 16
    read = read_header(path)
    assert read.frames == 200 and read.dim == 8 and read.data_offset == 12 + 64
    assert struct.unpack((">" if big_endian else "<") + "i", path.read_bytes()[:4])[0] == 204  # nSamples + 4
    assert path.stat().st_size == 12 + 64 + 200 * 16
    np.testing.assert_array_equal(read.scale, header.scale)
    decoded = read_features(path)
    assert decoded.dtype == np.float32 and decoded.shape == data.shape
    span = data.max(axis=0) - data.min(axis=0)
    step = np.where(span > 0, span / (2 * 32767), 0)
    assert (np.abs(decoded - data) <= step * 0.5 + np.abs(data) * 1e-6 + 1e-7).all()
    assert (decoded[:, 5] == 2.5).all()
    np.testing.assert_array_equal(read_features(path, 10, 19), decoded[10:20])
    # the extremes map to +-32767 as in HTK
    shorts = np.frombuffer(path.read_bytes()[12 + 64 :], dtype=(">" if big_endian else "<") + "i2").reshape(200, 8)
    assert shorts[:, 0].max() == 32767 and shorts[:, 0].min() == -32767


def test_qualifier_C_in_the_string_means_compressed(tmp_path):
    header = write_features(tmp_path / "c", frames(3, 2), qualifiers="_C")
    assert read_header(tmp_path / "c").compressed and header.compressed


def test_guid_after_the_header_only_when_parm_kind_is_exactly_12(tmp_path):
    data = frames(4, 3)
    guid = bytes(range(16))
    path = tmp_path / "g.htk"
    header = write_features(path, data, kind="ANON", guid=guid)
    assert header.has_guid and header.parm_kind == 12 and header.data_offset == 28
    assert path.read_bytes()[12:28] == guid
    assert bits(read_features(path)) == bits(data)
    # 12 with a qualifier: no GUID
    other = tmp_path / "q.htk"
    header = write_features(other, data, kind=12, qualifiers="_E")
    assert not header.has_guid and other.stat().st_size == 12 + 4 * 12
    assert bits(read_features(other)) == bits(data)
    # compressed 12 has a qualifier too: no GUID
    assert not write_features(tmp_path / "c.htk", data, kind=12, compressed=True).has_guid
    with pytest.raises(ValueError, match="16 bytes"):
        write_features(tmp_path / "x", data, kind="ANON", guid=b"short")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (header_bytes(1, 100000, 4, 8), "unsupported HTK parameter kind 8"),
        (header_bytes(1, 100000, 4, 10), "unsupported HTK parameter kind 10"),
        (header_bytes(1, 100000, 4, 9 | 0o40000), "VQ"),
        (header_bytes(1, 100000, 6, 9), "not a positive multiple of the element size 4"),
        (header_bytes(5, 100000, 3, 9 | 0o2000), "element size 2"),
        (header_bytes(1, 100000, 0, 9), "sampSize 0"),
        (header_bytes(3, 100000, 4, 9 | 0o2000), "compressed"),
        (header_bytes(-1, 100000, 4, 9), "negative"),
        (header_bytes(1, 100000, 4, 9)[:11], "truncated HTK header"),
        (header_bytes(4, 100000, 4, 9 | 0o2000) + b"\0" * 8, "A/B vectors"),
    ],
)
def test_header_validation(raw, message):
    with pytest.raises(FormatError, match=message) as error:
        read_header(raw)
    assert error.value.file == "<bytes>"


def test_header_errors_name_the_file_and_truncated_data_is_an_error(tmp_path):
    path = tmp_path / "bad.htk"
    path.write_bytes(header_bytes(1, 100000, 4, 30))
    with pytest.raises(FormatError, match="parameter kind 30") as error:
        read_features(path)
    assert error.value.file == str(path)
    path.write_bytes(header_bytes(3, 100000, 4, 9) + b"\0" * 8)
    with pytest.raises(FormatError, match="truncated HTK file"):
        read_features(path)
    assert read_features(path, 0, 1).shape == (2, 1)
    with pytest.raises(FormatError, match="outside"):
        read_features(path, 2, 3)
    with pytest.raises(FormatError, match="outside"):
        read_features(path, 2, 0)


def test_writer_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(ValueError, match="2-D"):
        write_features(tmp_path / "x", np.zeros(3))
    with pytest.raises(ValueError, match="unknown HTK base kind"):
        write_features(tmp_path / "x", np.zeros((1, 1)), kind="WAVEFORM")
    with pytest.raises(ValueError, match="unknown HTK qualifier"):
        write_features(tmp_path / "x", np.zeros((1, 1)), qualifiers="_Q")
    with pytest.raises(ValueError, match="VQ"):
        write_features(tmp_path / "x", np.zeros((1, 1)), qualifiers="_V")
    with pytest.raises(ValueError, match="NaN"):
        write_features(tmp_path / "x", np.array([[np.nan]]), compressed=True)
    with pytest.raises(ValueError, match="sampSize"):
        write_features(tmp_path / "x", np.zeros((1, 16384)))
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------- archives + SCP
def test_archive_and_scp_round_trip(tmp_path):
    utterances = {f"spk{i % 3}_utt{i}": frames(1 + 7 * i % 11, 5, seed=i) for i in range(12)}
    archive = str(tmp_path / "feats.ark")
    entries = write_archive(archive, utterances, kind="FBANK", qualifiers="_D")
    assert read_header(archive).frames == sum(len(u) for u in utterances.values())
    assert [e.key for e in entries] == list(utterances)
    write_scp(tmp_path / "feats.scp", entries)
    first = (tmp_path / "feats.scp").read_text().splitlines()[0]
    assert first == f"spk0_utt0.mfc={archive}[0,0]"
    index = parse_scp(tmp_path / "feats.scp")
    assert len(index) == 12 and index.duplicates is None
    assert index.keys.take(np.arange(12)) == list(utterances)
    assert index.paths == [archive] and index.path_ids.tolist() == [0] * 12
    assert index.path_ids.dtype == np.int32 and index.starts.dtype == np.int64
    assert index.starts.tolist() == [e.start for e in entries] and index.ends.tolist() == [e.end for e in entries]
    for i, (key, data) in enumerate(utterances.items()):
        got = read_features(index.paths[index.path_ids[i]], int(index.starts[i]), int(index.ends[i]))
        assert bits(got) == bits(data), key
        assert entries[i].frames == len(data)


def test_compressed_archive_reads_back_per_utterance(tmp_path):
    utterances = {"a": frames(4, 3, 1), "b": frames(6, 3, 2)}
    entries = write_archive(tmp_path / "c.ark", utterances, compressed=True, big_endian=False)
    for entry, data in zip(entries, utterances.values()):
        np.testing.assert_allclose(read_features(entry.path, entry.start, entry.end), data, atol=1e-3)


def test_archive_refuses_empty_and_mismatched_utterances(tmp_path):
    with pytest.raises(ValueError, match="no frames"):
        write_archive(tmp_path / "a", {"x": np.zeros((0, 2))})
    with pytest.raises(ValueError, match="same dim"):
        write_archive(tmp_path / "a", {"x": np.zeros((1, 2)), "y": np.zeros((1, 3))})
    with pytest.raises(ValueError, match="at least one"):
        write_archive(tmp_path / "a", {})


def test_write_scp_unranged_and_extension(tmp_path):
    write_scp(tmp_path / "s.scp", [ScpEntry("u1", "/x/u1.htk"), ScpEntry("d.u2", "a.ark", 3, 4)], ".fea")
    assert (tmp_path / "s.scp").read_text() == "u1.fea=/x/u1.htk\nd.u2.fea=a.ark[3,4]\n"
    index = parse_scp(tmp_path / "s.scp")
    assert index.keys.take(np.arange(2)) == ["u1", "d.u2"]
    assert index.starts.tolist() == [-1, 3] and index.ends.tolist() == [-1, 4]
    with pytest.raises(ValueError, match="invalid range"):
        write_scp(tmp_path / "t.scp", [ScpEntry("u", "p", 5, 4)])
    with pytest.raises(ValueError, match="'='"):
        write_scp(tmp_path / "t.scp", [ScpEntry("u=v", "p", 0, 4)])


def scp(tmp_path, text: str | bytes, name: str = "list.scp", **options):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return parse_scp(path, **options)


def rows(index) -> list[tuple]:
    return [
        (index.keys[i], index.paths[index.path_ids[i]], int(index.starts[i]), int(index.ends[i]))
        for i in range(len(index))
    ]


def test_key_is_the_logical_name_up_to_its_last_dot(tmp_path):
    index = scp(tmp_path, "spk1_utt7.mfc=/feats/a.ark[120,419]\na.b.c=/f[0,0]\nnodot=/f[1,1]\ndir/x.y=/f[2,2]\n")
    assert rows(index) == [
        ("spk1_utt7", "/feats/a.ark", 120, 419),
        ("a.b", "/f", 0, 0),
        ("nodot", "/f", 1, 1),
        ("dir/x", "/f", 2, 2),
    ]
    assert index.lines.tolist() == [1, 2, 3, 4] and index.paths == ["/feats/a.ark", "/f"]


def test_unranged_and_bare_entries(tmp_path):
    index = scp(tmp_path, "u1.mfc=/d/u1.htk\n/d/u2.htk\n")
    assert rows(index) == [("u1", "/d/u1.htk", -1, -1), ("/d/u2", "/d/u2.htk", -1, -1)]


def test_blank_lines_and_crlf(tmp_path):
    index = scp(tmp_path, "\r\na.mfc=p[0,1]\r\n\n   \n\t\r\nb.mfc=q[2,3]\r\nc.mfc=r\r\n")
    assert rows(index) == [("a", "p", 0, 1), ("b", "q", 2, 3), ("c", "r", -1, -1)]
    assert index.lines.tolist() == [2, 6, 7]


def test_no_trailing_newline_and_bom(tmp_path):
    assert rows(scp(tmp_path, b"\xef\xbb\xbfa.x=p[0,1]")) == [("a", "p", 0, 1)]


def test_three_dots_become_the_scp_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    index = scp(tmp_path, "a.mfc=.../feats/a.ark[0,9]\n.../b.htk\nc...mfc=x/.../y[0,0]\n", name="sub/l.scp")
    directory = str(tmp_path / "sub")
    assert rows(index) == [
        ("a", f"{directory}/feats/a.ark", 0, 9),
        (f"{directory}/b", f"{directory}/b.htk", -1, -1),
        (f"c{directory}mfc", "x/.../y", 0, 0),  # only the FIRST "..." of the entry is replaced
    ]


def test_prefix_path(tmp_path):
    text = "a.mfc=feats/a.ark[0,9]\nb.htk\nc.mfc=.../c.ark[1,2]\n"
    expected_a = ("a", "D:/data/x/feats/a.ark", 0, 9)
    for prefix in ("D:\\data\\x\\", "D:/data/x", "D:/data/x//"):
        index = scp(tmp_path, text, prefix_path=prefix)
        assert rows(index) == [
            expected_a,
            ("D:/data/x/b", "D:/data/x/b.htk", -1, -1),  # no '=': in front of the entry
            ("c", "D:/data/x/.../c.ark", 1, 2),  # with a prefix "..." stays
        ]
    assert rows(scp(tmp_path, text, prefix_path=""))[0] == ("a", "feats/a.ark", 0, 9)  # empty: no prefix


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("a.mfc=p[0,1]x", 13, "unexpected 'x' after"),
        ("a.mfc=p[0,1] ", 13, "after"),
        ("a.mfc=p[0,1]\r\r", 13, "after"),
        ("a.mfc=p[01]", 8, "no ','"),
        ("a.mfc=p[0,1", 12, "no ']'"),
        ("a.mfc=p[x,1]", 9, "start 'x'"),
        ("a.mfc=p[-1,1]", 9, "start '-1'"),
        ("a.mfc=p[0,]", 11, "end ''"),
        ("=p[0,1]", 1, "empty logical name"),
        ("a.mfc=[0,1]", 7, "no physical path"),
    ],
)
def test_malformed_lines_name_file_line_and_column(tmp_path, line, column, message):
    with pytest.raises(FormatError, match=message) as error:
        scp(tmp_path, f"ok.mfc=p[0,1]\n\n{line}\n")
    assert (error.value.file, error.value.line, error.value.column) == (str(tmp_path / "list.scp"), 3, column)
    assert f"list.scp:3:{column}" in str(error.value)


def test_duplicates_are_all_dropped_and_reported(tmp_path, caplog):
    text = "a.mfc=p[0,1]\nb.mfc=p[2,3]\na.x=q[0,0]\nc.mfc=p[4,5]\nb.mfc=p[2,3]\na.mfc=r[1,1]\n"
    with caplog.at_level(logging.WARNING, logger="cntkio"):
        index = scp(tmp_path, text)
    assert rows(index) == [("c", "p", 4, 5)]
    assert index.lines.tolist() == [4]
    assert index.duplicates is not None
    assert (index.duplicates.entries, index.duplicates.keys, index.duplicates.first_keys) == (5, 2, ("a", "b"))
    assert "5 SCP entries with 2 duplicated key(s) dropped: a, b" in caplog.text


def test_several_scp_files_concatenate_and_duplicates_span_them(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "1.scp").write_text("a.mfc=.../a.ark[0,1]\nb.mfc=x[0,0]\n")
    (tmp_path / "2.scp").write_text("c.mfc=.../c.ark[0,2]\nb.mfc=y[0,0]\n")
    index = parse_scp([tmp_path / "one" / "1.scp", str(tmp_path / "2.scp")])
    assert rows(index) == [("a", f"{tmp_path}/one/a.ark", 0, 1), ("c", f"{tmp_path}/c.ark", 0, 2)]
    assert index.source_ids.tolist() == [0, 1] and index.lines.tolist() == [1, 1]
    assert index.location(1).file == str(tmp_path / "2.scp") and index.location(1).sequence_key == "c"
    assert index.duplicates is not None and index.duplicates.first_keys == ("b",)


def test_non_ascii_keys(tmp_path):
    index = scp(tmp_path, "ütt1.mfc=p[0,1]\n日本.mfc=p[2,2]\nplain.x=p[3,3]\n")
    assert index.keys.take(np.arange(3)) == ["ütt1", "日本", "plain"]


def test_empty_scp_file(tmp_path):
    index = scp(tmp_path, "\n\n")
    assert len(index) == 0 and len(index.keys) == 0 and index.paths == []


def test_hundred_thousand_lines(tmp_path):
    n = 100_000
    lines = [f"spk{i % 97}_utt{i}.mfc=/data/feats/archive_{i // 1000}.ark[{i * 300},{i * 300 + 299}]" for i in range(n)]
    path = tmp_path / "big.scp"
    path.write_text("\n".join(lines) + "\n")
    index = parse_scp(path)
    assert len(index) == n and len(index.paths) == 100
    assert index.keys[n - 1] == f"spk{(n - 1) % 97}_utt{n - 1}" and int(index.ends[-1]) == n * 300 - 1
