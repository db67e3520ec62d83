"""Compatibility at the edge (issue 23): every constructor builds its own type; the explicit entry points
(``X.sharded``, ``HTKFeatureDeserializer.per_stream``) build the others; the public names (faces, compat/faces.py)
also take the spellings that build something else, and are the classes to ``isinstance``, subclassing, pickling and
attribute access. (No ``__new__`` and the core never importing compat: tests/test_layers.py.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import cntkio
import cntkio.io as C
from cntkio import ConfigError, DeserializerGroup, MinibatchSource, StreamDef, StreamDefs
from cntkio._src.compat.faces import Face
from cntkio._src.compat.legacy import CTFStreamMapping
from cntkio._src.formats import ctf, htk_features, htk_labels, image
from cntkio._src.formats.shards import ShardedDeserializer
from cntkio.htk import write_archive, write_scp

X = StreamDefs(x=StreamDef(field="x", shape=1))


def shards(tmp_path: Path, count: int = 3) -> list[Path]:
    paths = []
    for k in range(count):
        path = tmp_path / f"part-{k}.ctf"
        path.write_text("".join(f"|x {10 * k + i}\n" for i in range(4)))
        paths.append(path)
    return paths


def test_sharded_is_the_explicit_entry_point_for_several_files(tmp_path: Path) -> None:
    paths = shards(tmp_path)
    corpus = ctf.CTFDeserializer.sharded(str(tmp_path / "part-*.ctf"), X)
    assert isinstance(corpus, ShardedDeserializer) and len(corpus.shards) == 3
    assert corpus.source_name == str(tmp_path / "part-*.ctf")
    assert [s.source_name for s in ctf.CTFDeserializer.sharded(paths[::-1], X).shards] == [str(p) for p in paths[::-1]]
    single = ctf.CTFDeserializer.sharded(paths[0], X)  # one file: a corpus of one shard, the same type
    assert isinstance(single, ShardedDeserializer) and len(single.shards) == 1
    with pytest.raises(TypeError):
        ctf.CTFDeserializer(paths, X)  # type: ignore[arg-type]  # the class opens one file


def test_the_public_name_opens_one_file_or_several(tmp_path: Path) -> None:
    paths = shards(tmp_path)
    one = cntkio.CTFDeserializer(paths[0], X)
    assert type(one) is ctf.CTFDeserializer
    several = cntkio.CTFDeserializer([str(p) for p in paths], X)
    assert isinstance(several, ShardedDeserializer) and not isinstance(several, cntkio.CTFDeserializer)
    values = MinibatchSource(several, randomize=False, max_sweeps=1).next_minibatch(100)["x"].values.ravel()
    assert values.tolist() == [10 * k + i for k in range(3) for i in range(4)]


def test_a_face_is_its_class_to_isinstance_subclassing_pickling_and_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    face = cntkio.CTFDeserializer
    assert isinstance(face, Face) and face is C.CTFDeserializer and face.__wrapped__ is ctf.CTFDeserializer
    reader = ctf.CTFDeserializer(shards(tmp_path, 1)[0], X)
    assert isinstance(reader, face) and isinstance(reader, (cntkio.CBFDeserializer, face))
    assert issubclass(ctf.CTFDeserializer, face) and not issubclass(image.ImageDeserializer, face)

    class Mine(cntkio.CTFDeserializer):
        pass

    assert Mine.__mro__[1] is ctf.CTFDeserializer and issubclass(Mine, face)
    assert pickle.loads(pickle.dumps(face)) is face
    assert face.sharded == ctf.CTFDeserializer.sharded and face.__name__ == "CTFDeserializer"
    assert "sharded" in (face.__doc__ or "") and face.__doc__.startswith(ctf.CTFDeserializer.__doc__ or "")
    monkeypatch.setattr(face, "chunk_file_bytes", lambda self: None)  # reaches the class (and is undone there)
    assert reader.chunk_file_bytes() is None


def test_cntk_2_0_forms_are_translated_at_the_edge(tmp_path: Path) -> None:
    path = shards(tmp_path, 1)[0]
    mapping = C.CTFDeserializer(path, max_errors=1)
    assert isinstance(mapping, CTFStreamMapping)
    with pytest.warns(DeprecationWarning):
        mapping.map_input("x", 1)
    assert isinstance(mapping.build(), ctf.CTFDeserializer) and mapping.build().errors.max_errors == 1
    with pytest.raises(TypeError):
        ctf.CTFDeserializer(path)  # type: ignore[call-arg]  # the class needs streams
    assert not hasattr(image.ImageDeserializer, "crop") and callable(C.ImageDeserializer.crop)
    with pytest.raises(TypeError):
        htk_labels.HTKMLFDeserializer(None, StreamDefs(y=StreamDef(shape=2, mlf="a.mlf")), phoneBoundaries=True)  # type: ignore[call-arg]


def test_several_htk_streams_per_stream(tmp_path: Path) -> None:
    scps = {}
    for name, dim in (("a", 2), ("b", 3)):
        frames = {f"u{i}": np.full((2 + i, dim), i, dtype=np.float32) for i in range(3)}
        scps[name] = tmp_path / f"{name}.scp"
        write_scp(scps[name], write_archive(tmp_path / f"{name}.ark", frames))
    streams = StreamDefs(a=StreamDef(shape=2, scp=str(scps["a"])), b=StreamDef(shape=3, scp=str(scps["b"])))
    group = htk_features.HTKFeatureDeserializer.per_stream(streams, chunk_frames=4)
    assert isinstance(group, DeserializerGroup) and [d.stream_name for d in group] == ["a", "b"]
    assert all(type(d) is htk_features.HTKFeatureDeserializer and d.chunk_frames == 4 for d in group)
    with pytest.raises(ConfigError, match=r"reads one stream, got 2 \(a, b\).*per_stream"):
        htk_features.HTKFeatureDeserializer(streams)
    public = cntkio.HTKFeatureDeserializer(streams)  # CNTK's form: the public name calls per_stream
    assert isinstance(public, DeserializerGroup) and len(public) == 2
    minibatch = MinibatchSource(public, randomize=False, max_sweeps=1).next_minibatch(100)
    assert minibatch["a"].num_samples == minibatch["b"].num_samples == 2 + 3 + 4
