"""Paths that are not regular files: a FIFO or a device (``/dev/zero``) named inside the data (an image map's line, a
zip archive of one, an SCP entry, an MLF named by a list) is refused with an error naming it and where the data named
it, instead of hanging on the open (a FIFO without a writer) or reading without end (``/dev/zero`` grew to GBs); a
listing the user gives (image map, SCP file, state list) may be a pipe, read once, but not a device.

Each case runs in a subprocess with a timeout, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from cntkio._src.common.errors import FormatError
from cntkio._src.formats.image_map import parse_image_map
from cntkio._src.formats.mlf import read_state_list
from cntkio._src.formats.scp import parse_scp

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="POSIX")
T = TypeVar("T")
HANG_GUARD = 120  # seconds: a hang of the case under test, not a performance bar


def run(script: str, cwd: Path) -> str:
    """Runs ``script`` in a fresh interpreter (in ``cwd``); its output, stdout then stderr."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)], cwd=cwd, capture_output=True, text=True,
            timeout=HANG_GUARD,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the read hung")
    return done.stdout + done.stderr


def png(path: Path) -> Path:
    cv2 = pytest.importorskip("cv2")
    cv2.imwrite(str(path), np.zeros((4, 4, 3), dtype=np.uint8))
    return path


READ_IMAGES = """
    from cntkio import ImageDeserializer, MinibatchSource, StreamDef, StreamDefs
    from cntkio import transforms as T
    from cntkio._src.common.errors import FormatError
    streams = StreamDefs(x=StreamDef(field="image", transforms=[T.scale(4, 4, 3)]), y=StreamDef(field="label", shape=2))
    try:
        source = MinibatchSource(ImageDeserializer("map.txt", streams, max_errors=5), randomize=False, max_sweeps=1)
        while source.next_minibatch(8):
            pass
        print("read")
    except FormatError as error:
        print("FormatError:", error)
"""


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_an_image_map_line_naming_a_fifo_or_a_device_is_refused(tmp_path: Path, kind: str) -> None:
    fine = png(tmp_path / "fine.png")
    if kind == "fifo":
        os.mkfifo(tmp_path / "pipe.png")
        named = str(tmp_path / "pipe.png")
    else:
        named = kind
    (tmp_path / "map.txt").write_text(f"{fine}\t0\n{named}\t1\n{fine}\t0\n")
    out = run(READ_IMAGES, tmp_path)
    assert "FormatError:" in out and f"image file '{named}' is " in out, out
    assert ("a FIFO" if kind == "fifo" else "a character device") in out
    assert "map.txt:2" in out  # where the map names it


def test_a_zip_archive_named_by_an_image_map_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "images.zip")
    (tmp_path / "map.txt").write_text(f"{tmp_path}/images.zip@/a.png\t0\n")
    out = run(READ_IMAGES, tmp_path)
    assert f"zip archive '{tmp_path}/images.zip' is a FIFO" in out and "map.txt:1" in out, out


def test_an_undecodable_image_names_its_file(tmp_path: Path) -> None:
    fine = png(tmp_path / "fine.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (tmp_path / "map.txt").write_text(f"{fine}\t0\n{tmp_path}/corrupt.png\t1\n")
    out = run(READ_IMAGES.replace("max_errors=5", "max_errors=0"), tmp_path)
    assert f"cannot decode image file '{tmp_path}/corrupt.png'" in out and "map.txt:2" in out, out


def test_an_scp_entry_naming_a_fifo_or_a_device_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a.htk")
    (tmp_path / "list.scp").write_text(f"a={tmp_path}/a.htk\nb=/dev/zero\n")
    out = run(
        """
        from cntkio import HTKFeatureDeserializer, StreamDef, StreamDefs
        from cntkio._src.common.errors import FormatError
        try:
            HTKFeatureDeserializer(StreamDefs(f=StreamDef(shape=3, scp="list.scp")), max_errors=5)
        except FormatError as error:
            print("FormatError:", error)
        """,
        tmp_path,
    )
    assert "no HTK file could be read" in out, out


LISTS = {
    "image map": "from cntkio._src.formats.image_map import parse_image_map as read; read(PATH, label_dim=None)",
    "SCP file": "from cntkio._src.formats.scp import parse_scp as read; read(PATH)",
    "state list": "from cntkio._src.formats.mlf import read_state_list as read; read(PATH)",
    "MLF file list": "from cntkio._src.formats.mlf import read_mlf_file_list as read; read(PATH)",
}


@pytest.mark.parametrize("what", sorted(LISTS))
def test_a_listing_that_is_a_device_is_refused_not_copied(tmp_path: Path, what: str) -> None:
    out = run(
        f"""
        from cntkio._src.common.errors import FormatError
        PATH = "/dev/zero"
        try:
            {LISTS[what]}
        except FormatError as error:
            print("FormatError:", error)
        """,
        tmp_path,
    )
    assert f"FormatError: /dev/zero (byte offset 0): {what} '/dev/zero' is a character device" in out, out


def test_an_mlf_named_by_a_list_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "train.mlf")
    out = run(
        """
        from cntkio._src.common.errors import FormatError
        from cntkio._src.formats.mlf import parse_mlf
        try:
            parse_mlf(["train.mlf"], None, 10)
        except FormatError as error:
            print("FormatError:", error)
        """,
        tmp_path,
    )
    assert "MLF file 'train.mlf' is a FIFO, not a regular file" in out, out


def through_a_pipe(path: Path, data: bytes, read: Callable[[Path], T]) -> T:
    os.mkfifo(path)
    writer = threading.Thread(target=path.write_bytes, args=(data,))
    writer.start()
    try:
        return read(path)
    finally:
        writer.join()


def test_listings_given_as_pipes_are_still_read_once(tmp_path: Path) -> None:
    images = through_a_pipe(tmp_path / "map", b"a.png\t0\n", lambda p: parse_image_map(p, label_dim=None))
    assert images.paths.tolist() == ["a.png"]
    scp = through_a_pipe(tmp_path / "scp", b"a=a.htk\n", parse_scp)
    assert list(scp.keys) == ["a"]
    assert through_a_pipe(tmp_path / "states", b"s1\ns2\n", read_state_list) == ["s1", "s2"]


def test_a_directory_named_as_a_state_list_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"state list .* is a directory"):
        read_state_list(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_image_swapped_for_a_fifo_or_device_after_the_check_is_refused_by_the_read(tmp_path, kind):
    """The check before the read and the read are two steps: a FIFO or device put in the file's place between them is
    refused by the read itself (opened without waiting for a writer, then checked), never waited on or read without
    end."""
    target = tmp_path / "image.png"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    (tmp_path / "map.txt").write_text("image.png\t0\n")
    out = run(
        """
        from cntkio._src.formats import image_map
        images = image_map.parse_image_map("map.txt", label_dim=1)
        checks = []
        real = image_map.require_regular_file
        def passing_once(*args):  # the file was regular when checked; swapped right after
            checks.append(args)
            if len(checks) > 1:
                real(*args)
        image_map.require_regular_file = passing_once
        try:
            image_map.read_image_bytes(images, 0)
            print("read")
        except image_map.FormatError as error:
            print("refused:", error)
        """,
        tmp_path,
    )
    assert "refused:" in out and "image.png" in out and "not a regular file" in out, out
