"""Paths and files that are hostile or odd (issue 24 §2.7): every error has cntkio's types and a location — a NUL in
a path (was ``ValueError: embedded null byte``), a corrupt zip item (``zlib.error``, ``LZMAError``), an MLF path that
is a directory when it is opened (``RuntimeError``) — and ``close()`` from another thread while a chunk loads with
prefetch off (``InvalidStateError`` in the reading thread)."""

from __future__ import annotations

import io
import os
import struct
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cntkio import (
    Base64ImageDeserializer,
    CBFDeserializer,
    ConfigError,
    CTFDeserializer,
    FormatError,
    HTKFeatureDeserializer,
    HTKMLFDeserializer,
    ImageDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    StreamInformation,
    UserDeserializer,
)
from cntkio._src.formats.htk_files import read_header
from cntkio._src.formats.image_map import ZipArchives, parse_image_map
from cntkio._src.formats.mlf import parse_mlf, read_mlf_file_list, read_state_list
from cntkio._src.formats.scp import parse_scp
from cntkio.brainscript import load_config, reader_plan
from cntkio.htk import write_archive, write_scp

NUL = "\x00"
HANG_GUARD = 120  # seconds: a deadlock of the case under test, not a performance bar


def image_streams() -> StreamDefs:
    return StreamDefs(image=StreamDef(field="image", transforms=[]), label=StreamDef(field="label", shape=2))


# --- a NUL in a path -------------------------------------------------------------------------------------------------

NAMED_BY_THE_USER: dict[str, Callable[[str], Any]] = {
    "CTF": lambda p: CTFDeserializer(p, StreamDefs(x=StreamDef(field="x", shape=1))),
    "CBF": lambda p: CBFDeserializer(p),
    "image map": lambda p: ImageDeserializer(p, image_streams()),
    "Base64 image file": lambda p: Base64ImageDeserializer(p, image_streams()),
    "SCP file": lambda p: HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=3, scp=p))),
    "MLF file": lambda p: HTKMLFDeserializer(None, StreamDefs(l=StreamDef(shape=3, mlf=p))),
    "parse_mlf": lambda p: parse_mlf(p, None, 3),
    "state list": read_state_list,
    "MLF file list": read_mlf_file_list,
    "parse_scp": parse_scp,
    "parse_image_map": lambda p: parse_image_map(p, label_dim=2),
    "HTK file": read_header,
}


@pytest.mark.parametrize("kind", list(NAMED_BY_THE_USER))
def test_a_nul_in_a_path_is_a_format_error_at_the_file(tmp_path: Path, kind: str) -> None:
    path = str(tmp_path / f"data{NUL}.x")
    with pytest.raises(FormatError, match=r"a file name cannot hold a NUL byte \(\\x00\)") as error:
        NAMED_BY_THE_USER[kind](path)
    assert error.value.file == str(tmp_path / "data\\x00.x")  # printable: the NUL written as \x00
    assert NUL not in str(error.value)


def test_a_nul_in_a_state_list_path(tmp_path: Path) -> None:
    mlf = tmp_path / "l.mlf"
    mlf.write_text('#!MLF!#\n"u.lab"\n0 1 a\n.\n')
    with pytest.raises(FormatError, match=r"state list '.*\\x00.*': a file name cannot hold a NUL byte"):
        HTKMLFDeserializer(str(tmp_path / f"s{NUL}.list"), StreamDefs(l=StreamDef(shape=1, mlf=str(mlf))))


def test_a_nul_in_an_image_path_of_a_map_names_the_map_line(tmp_path: Path) -> None:
    map_file = tmp_path / "map.txt"
    map_file.write_text(f"{tmp_path}/a.png\t0\n{tmp_path}/b{NUL}.png\t1\n")
    images = parse_image_map(str(map_file), label_dim=2)
    from cntkio._src.formats.image_map import read_image_bytes

    with pytest.raises(FormatError, match=r"image file '.*b\\x00\.png': a file name cannot hold") as error:
        read_image_bytes(images, 1)
    assert (error.value.file, error.value.line) == (str(map_file), 2)


def test_a_nul_in_an_htk_path_of_an_scp_file_names_the_scp_line(tmp_path: Path) -> None:
    write_archive(tmp_path / "a.htk", {"u": np.zeros((3, 2), np.float32)})
    scp = tmp_path / "f.scp"
    scp.write_text(f"u1={tmp_path}/a.htk[0,2]\nu2={tmp_path}/b{NUL}.htk[0,2]\n")
    with pytest.raises(FormatError, match=r"a file name cannot hold a NUL byte") as error:
        HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=2, scp=str(scp))))
    assert (error.value.file, error.value.line) == (str(scp), 2)


def test_a_nul_in_a_config_path_and_in_an_mlf_list_of_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the config '.*\\x00.*': a file name cannot hold a NUL byte"):
        load_config(str(tmp_path / f"c{NUL}.cntk"))
    write_scp(tmp_path / "f.scp", write_archive(tmp_path / "a.htk", {"u": np.zeros((3, 2), np.float32)}))
    config = tmp_path / "htk.cntk"
    config.write_text(
        "reader = [ readerType = HTKMLFReader\n features = [ dim = 2 ; scpFile = f.scp ]\n"
        f'labels = [ mlfFileList = "l{NUL}.list" ; labelDim = 2 ]\n]\n'
    )
    with pytest.raises(FormatError, match=r"MLF file list '.*l\\x00\.list': a file name cannot hold"):
        reader_plan(config, base_dir=tmp_path)


# --- a corrupt zip item ----------------------------------------------------------------------------------------------


def corrupt_zip(path: Path, method: int) -> None:
    """A zip archive of one item, ``img/0.png``, whose compressed bytes are damaged (its table is intact)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr("img/0.png", bytes(range(256)) * 64)
    data = bytearray(buffer.getvalue())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("img/0.png")
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length + info.compress_size // 4
    data[start : start + 16] = bytes(b ^ 0xFF for b in data[start : start + 16])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2], ids=["deflate", "lzma", "bzip2"]
)
def test_a_corrupt_zip_item_is_a_format_error_at_the_map_line(tmp_path: Path, method: int) -> None:
    corrupt_zip(tmp_path / "a.zip", method)
    map_file = tmp_path / "map.txt"
    map_file.write_text(f"{tmp_path}/a.zip@/img/0.png\t1\n")
    with pytest.raises(FormatError, match=r"cannot read image 'img/0\.png' of zip archive '.*a\.zip'") as error:
        ImageDeserializer(str(map_file), image_streams())  # its first image is read to learn the image size
    assert (error.value.file, error.value.line) == (str(map_file), 1)
    images = parse_image_map(str(map_file), label_dim=2)
    with ZipArchives(images) as archives, pytest.raises(FormatError, match="cannot read image"):
        archives.read(0, "img/0.png", images.location(0))


# --- an MLF that is a directory when it is opened -----------------------------------------------------------------


def test_an_mlf_replaced_by_a_directory_after_its_check_is_a_format_error(tmp_path: Path, monkeypatch: Any) -> None:
    regular = tmp_path / "ok.mlf"
    regular.write_text('#!MLF!#\n"u.lab"\n0 1 a\n.\n')
    directory = tmp_path / "labels.mlf"
    directory.mkdir()
    real_stat = os.stat

    def stat_before_the_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        # the name was a regular file when it was checked, and is a directory when it is opened
        return real_stat(regular if os.fspath(path) == str(directory) else path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_before_the_swap)
    with pytest.raises(FormatError, match="is a directory, not a regular file") as error:
        parse_mlf(str(directory), None, 3)
    assert error.value.file == str(directory)


# --- close() while a chunk loads, prefetch off ------------------------------------------------------------------


class Blocking(UserDeserializer):
    """Chunk 1 waits (in the reading thread: prefetch is off) until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.block = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def stream_infos(self) -> list[StreamInformation]:
        return [StreamInformation("x", 0, "dense", np.float32, (1,))]

    def num_chunks(self) -> int:
        return 2

    def get_chunk(self, chunk_id: int) -> dict[str, np.ndarray]:
        if self.block and chunk_id == 1:
            self.entered.set()
            self.release.wait(HANG_GUARD)
        return {"x": np.full((3, 1), chunk_id, np.float32)}


def test_close_from_another_thread_while_a_chunk_loads_with_prefetch_off(tmp_path: Path) -> None:
    plugin = Blocking()
    source = MinibatchSource(plugin, prefetch=False, randomize=False)
    plugin.block = True
    outcome: dict[str, BaseException | str] = {}

    def read() -> None:
        try:
            while source.next_minibatch(3):
                pass
            outcome["reader"] = "ended"
        except BaseException as error:
            outcome["reader"] = error

    reader = threading.Thread(target=read)
    reader.start()
    assert plugin.entered.wait(HANG_GUARD)
    closer = threading.Thread(target=source.close)
    closer.start()
    closer.join(HANG_GUARD)  # close does not wait for the chunk the reading thread loads
    assert not closer.is_alive()
    plugin.release.set()
    reader.join(HANG_GUARD)
    assert not reader.is_alive()
    assert isinstance(outcome["reader"], ValueError) and "closed" in str(outcome["reader"])
    source.close()  # twice: harmless
