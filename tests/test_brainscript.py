"""cntkio.brainscript: the config syntax (spec/brainscript-reader-config.md) and reader sections of every format."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cntkio import (
    FULL_DATA_SWEEP,
    ConfigError,
    CTFDeserializer,
    MinibatchSource,
    StreamDef,
    StreamDefs,
    write_cbf,
)
from cntkio._src.config.syntax import parse_config
from cntkio.brainscript import IGNORED_KEYS, load_config, load_reader, reader_plan, reader_sections
from cntkio.htk import write_archive, write_mlf, write_scp, write_state_list

DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"

CTF_DATA = "1 |x 1 2 |y 0:1\n1 |x 3 4\n2 |x 5 6 |y 2:1\n3 |x 7 8 |y 1:1\n3 |x 9 10\n3 |x 11 12\n"


def read_all(source: MinibatchSource, size: int = 1000) -> dict[str, list[np.ndarray]]:
    """Every minibatch of one epoch, per stream: the values of each sequence (sparse streams densified)."""
    out: dict[str, list[np.ndarray]] = {}
    while minibatch := source.next_minibatch(size):
        for name in source.streams:
            data = minibatch[name]
            for sequence in data.as_sequences():
                dense = sequence.toarray() if hasattr(sequence, "toarray") else np.asarray(sequence)
                out.setdefault(name, []).append(dense)
    return out


# --- syntax ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ('a=1; b = "x;y" , c', "a", "1"),
        ('a=1; b = "x;y" , c', "b", "x;y"),
        ('a=1; b = "x;y" , c', "c", "true"),
        ("file = data#1.txt", "file", "data#1.txt"),
        ("file = data #1", "file", "data"),
        ("file = data\t# comment", "file", "data"),
        ("root=/d\np = $root$/x", "p", "/d/x"),
        ("ROOT=/d\np = $Root$/x", "p", "/d/x"),
        ('q = "a # b"', "q", "a # b"),
        ("price = 3$ each", "price", "3$ each"),
        ("a = $b$$c$\nb=1\nc=2", "a", "12"),
        ("# a comment line\n  # another\nk = v", "k", "v"),
    ],
)
def test_spec_scalar_examples(text: str, key: str, expected: str) -> None:
    assert parse_config(text)[key].text == expected


def test_blocks_in_both_brace_styles_are_the_same_structure() -> None:
    for text in ("r=[ A=[dim=3] ]", "r={ A={dim=3} }", "r = [\n  A = {\n dim = 3\n }\n]", "r[A[dim=3]]"):
        assert parse_config(text).path("r.A")["dim"].as_int() == 3


def test_arrays_repeats_and_custom_separators() -> None:
    config = parse_config("s = 0.4:0.6\nlr = 0.1*2:0.05\nx = (;a:b;c)\nt = ( [type=A] : [type=B] )\nn = 1e3\nw = 5")
    assert config["s"].as_numbers() == [0.4, 0.6]
    assert config["lr"].as_numbers() == [0.1, 0.1, 0.05]
    assert [e.text for e in config["x"].elements()] == ["a:b", "c"]
    assert [e.as_section()["type"].text for e in config["t"].elements()] == ["A", "B"]
    assert config["n"].as_ints() == [1000]
    assert config["w"].as_ints() == [5]
    with pytest.raises(ConfigError, match="integer"):
        config["n"].as_int()  # a whole token must be a decimal number


def test_paths_after_an_opening_brace_are_not_custom_separators() -> None:
    config = parse_config("a = (../x.txt : ./y.txt)")
    assert [e.text for e in config["a"].elements()] == ["../x.txt", "./y.txt"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("True", True), ("T", True), ("1", True), ("false", False), ("F", False), ("0", False)],
)
def test_booleans(value: str, expected: bool) -> None:
    assert parse_config(f"b = {value}")["b"].as_bool() is expected
    assert parse_config('b = ""')["b"].as_bool() is False


def test_bad_boolean_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"<config>:2: b: expected a boolean"):
        parse_config("a=1\nb = yes")["b"].as_bool()


def test_keys_are_case_insensitive_and_the_last_value_wins() -> None:
    config = parse_config("definesMBSize = false\ndefinesMbSize = true")
    assert config["DEFINESMBSIZE"].as_bool() is True
    assert config.keys() == ["definesMbSize"]


def test_sections_given_twice_merge() -> None:
    config = parse_config("T = [ a = 1 ; b = 2 ]\nT = [ b = 3 ; c = 4 ]")
    section = config.section("T")
    assert [section[k].text for k in ("a", "b", "c")] == ["1", "3", "4"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a = [ b = 1 )", r"<config>:1: '\)' closes '\[' opened at line 1"),
        ("a = [\n b = 1\n", r"<config>:1: '\[' is never closed"),
        ('a = "open', "double quote is not closed"),
        ("a =\nb = 1", "'a' has an empty value"),
        ("x y = 1", "expected 'key = value'"),
    ],
)
def test_syntax_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)["b"] if "b" in text else parse_config(text).keys()


def test_an_empty_section_is_allowed() -> None:
    assert parse_config("a = []")["a"].as_section().keys() == []


def test_a_stray_closing_brace_at_the_top_level_is_tolerated() -> None:
    # HTKMLFReaderIVectorSimple_Config.cntk in CNTK's own test corpus ends with one; CNTK ran it.
    assert parse_config("T = { r = { x = 1 } }\n}\ny = 2")["y"].text == "2"


def test_variable_errors() -> None:
    with pytest.raises(ConfigError, match=r"<config>:2: p: unknown variable \$missing\$"):
        _ = parse_config("a=1\np = $missing$/x")["p"].text
    with pytest.raises(ConfigError, match=r"'\$\$'"):
        _ = parse_config("p = a$$b")["p"].text
    with pytest.raises(ConfigError, match="refers to itself"):
        _ = parse_config("a = $b$\nb = $a$")["a"].text
    with pytest.raises(ConfigError, match="is a block"):
        _ = parse_config("s = [x=1]\np = $s$/y")["p"].text


def test_variables_are_found_in_the_section_then_its_parents() -> None:
    config = parse_config("d = top\nT = [ d = inner ; R = [ f = $d$/a ] ]\nU = [ R = [ f = $d$/b ] ]")
    assert config.path("T.R")["f"].text == "inner/a"
    assert config.path("U.R")["f"].text == "top/b"


def test_overrides_as_mapping_dotted_paths_and_command_line_strings() -> None:
    text = "DataDir = /orig\nTrain = [ reader = [ file = $DataDir$/a.ctf ; randomize = true ] ]"
    config = parse_config(text, overrides={"DataDir": "/data", "Train.reader.randomize": False})
    reader = config.path("Train.reader")
    assert reader["file"].text == "/data/a.ctf" and reader["randomize"].as_bool() is False
    config = parse_config(text, overrides=["datadir=/x", "Train=[reader=[extra=1]]", "a=1, b=2"])
    reader = config.path("Train.reader")
    assert reader["file"].text == "/x/a.ctf" and reader["extra"].text == "1" and reader["randomize"].as_bool()
    assert config["b"].text == "2"


def test_blocks_nobody_reads_only_need_balanced_braces() -> None:
    text = """
    BrainScriptNetworkBuilder = {
        model = Sequential ( EmbeddingLayer {150} : RecurrentLSTMLayer {300} : DenseLayer {10} )
        ce = CrossEntropyWithSoftmax (labels, z)
        f(x) = x + 1   # a function
        featureNodes = (features)
    }
    reader = [ readerType = CNTKTextFormatReader ]
    """
    config = parse_config(text)
    assert reader_sections(config) == ["reader"]


# --- readers -----------------------------------------------------------------------------------------------------


def ctf_file(tmp_path: Path, name: str = "data.ctf", text: str = CTF_DATA) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


LEGACY_CTF = """
DataDir = $ConfigDir$
precision = "double"
Train = [
    action = "train"
    SGD = [ epochSize = 0 ; maxEpochs = 2 ]
    reader = [
        readerType = "CNTKTextFormatReader"
        file = "$DataDir$/data.ctf"
        randomize = false
        maxErrors = 3
        input = [
            features = [ alias = "x" ; dim = 2 ; format = "dense" ]
            labels = [ alias = "y" ; dim = 3 ; format = "sparse" ]
        ]
    ]
]
"""


def test_legacy_ctf_reader_reads_what_the_python_api_reads(tmp_path: Path) -> None:
    ctf_file(tmp_path)
    config = tmp_path / "train.cntk"
    config.write_text(LEGACY_CTF)
    source = load_reader(config, "Train.reader")
    direct = MinibatchSource(
        CTFDeserializer(
            tmp_path / "data.ctf",
            StreamDefs(features=StreamDef("x", 2), labels=StreamDef("y", 3, is_sparse=True)),
            precision="double",
        ),
        randomize=False,
        max_sweeps=1,
    )
    ours, theirs = read_all(source), read_all(direct)
    assert source.streams.features.dtype == np.float64 and source.epoch_size == source.sweep_size
    assert source.max_samples == FULL_DATA_SWEEP  # epochSize = 0: an epoch is a sweep
    assert ours.keys() == theirs.keys()
    for name in ours:
        for a, b in zip(ours[name], theirs[name], strict=True):
            np.testing.assert_array_equal(a, b)
    assert ours["features"][0].tolist() == [[1, 2], [3, 4]]
    source.start_epoch(1)  # the next epoch of the endless timeline reads the same sweep again
    assert len(read_all(source)["features"]) == 3


def test_randomization_defaults_of_each_form(tmp_path: Path) -> None:
    ctf_file(tmp_path)
    base = f"file = {tmp_path}/data.ctf\ninput = [ x = [ dim = 2 ; format = dense ] ]"
    legacy = reader_plan(f"reader = [ readerType = CNTKTextFormatReader\n{base} ]")
    assert legacy.options["randomize"] and legacy.options["randomization_window_in_chunks"] == 128
    small = reader_plan(f"reader = [ readerType = CNTKTextFormatReader ; chunkSizeInBytes = 1073741824\n{base} ]")
    assert small.options["randomization_window_in_chunks"] == 4
    composite = reader_plan(
        f"reader = [ randomizationWindow = 1000 ; randomizationSeed = 7\n deserializers = ( [ "
        f"type = CNTKTextFormatDeserializer ; module = CNTKTextFormatReader\n{base} ] ) ]"
    )
    assert composite.options["randomization_window_in_samples"] == 1000 and composite.options["randomization_seed"] == 7
    with pytest.raises(ConfigError, match="requires an explicit randomizationWindow"):
        reader_plan(
            f"reader = [ sampleBasedRandomizationWindow = true\n deserializers = ( [ "
            f"type = CNTKTextFormatDeserializer\n{base} ] ) ]"
        )
    off = reader_plan(f"reader = [ readerType = CNTKTextFormatReader ; randomize = none\n{base} ]")
    assert not off.options["randomize"]


def test_reader_options_are_inherited_from_parent_sections(tmp_path: Path) -> None:
    """CNTK looked reader parameters up in the enclosing sections too (a top-level override reaches the reader)."""
    ctf_file(tmp_path)
    text = (
        "frameMode = true\nmaxErrors = 5\nT = [ reader = [ readerType = CNTKTextFormatReader"
        f" ; file = {tmp_path}/data.ctf\ninput = [ x = [ dim = 2 ; format = dense ] ] ] ]"
    )
    plan = reader_plan(text, "T.reader")
    assert plan.options["frame_mode"] is True
    assert plan.deserializers[0].errors.max_errors == 5  # type: ignore[attr-defined]
    truncated = reader_plan(text, "T.reader", ["frameMode=false", "truncated=true, truncationLength=30"])
    assert truncated.options["truncation_length"] == 30 and not truncated.options["frame_mode"]


def test_composite_of_two_ctf_files_joins_by_key(tmp_path: Path) -> None:
    ctf_file(tmp_path, "x.ctf", "1 |x 1 2\n1 |x 3 4\n2 |x 5 6\n")
    ctf_file(tmp_path, "y.ctf", "2 |y 1:1\n1 |y 0:1\n")
    text = """
    reader = {
        randomize = false
        deserializers = (
            { type = "CNTKTextFormatDeserializer" ; module = "CNTKTextFormatReader" ; file = "x.ctf"
              input = { features = { alias = "x" ; dim = 2 ; format = "dense" } } }
          : { type = "CNTKTextFormatDeserializer" ; module = "CNTKTextFormatReader" ; file = "y.ctf"
              input = { labels = { alias = "y" ; dim = 2 ; format = "sparse" } } }
        )
    }
    """
    source = load_reader(text, base_dir=tmp_path)
    assert [type(d).__name__ for d in source.deserializers] == ["CTFDeserializer", "CTFDeserializer"]
    out = read_all(source)
    assert [s.tolist() for s in out["labels"]] == [[[1, 0]], [[0, 1]]]
    assert [len(s) for s in out["features"]] == [2, 1]


def test_cbf_reader_both_forms(tmp_path: Path) -> None:
    ctf = ctf_file(tmp_path)
    streams = StreamDefs(features=StreamDef("x", 2), labels=StreamDef("y", 3, is_sparse=True))
    write_cbf(CTFDeserializer(ctf, streams), tmp_path / "data.cbf")
    legacy = load_reader("reader = [ readerType = CNTKBinaryReader ; file = data.cbf ; randomize = false ]",
                         base_dir=tmp_path)  # fmt: skip
    composite = load_reader(
        "reader = [ randomize = false ; deserializers = ( [ type = CNTKBinaryFormatDeserializer ; file = data.cbf"
        "\n input = [ feats = [ alias = features ] ] ] ) ]",
        base_dir=tmp_path,
    )
    expected = read_all(MinibatchSource(CTFDeserializer(ctf, streams), randomize=False, max_sweeps=1))
    assert [a.tolist() for a in read_all(legacy)["features"]] == [a.tolist() for a in expected["features"]]
    assert [a.tolist() for a in read_all(composite)["feats"]] == [a.tolist() for a in expected["features"]]


def htk_corpus(tmp_path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feats = {
        "utt1": rng.standard_normal((4, 3)).astype(np.float32),
        "utt2": rng.standard_normal((2, 3)).astype(np.float32),
    }
    write_scp(tmp_path / "feats.scp", write_archive(tmp_path / "feats.ark", feats))
    write_mlf(tmp_path / "labels.mlf", {"utt1": [(0, 3, "a"), (3, 4, "b")], "utt2": [(0, 2, "b")]}, units="frames")
    write_state_list(tmp_path / "states.list", ["a", "b"])
    return feats


@pytest.mark.parametrize("form", ["HTKMLFReader", "HTKDeserializers", "composite"])
def test_htk_features_and_mlf_labels(tmp_path: Path, form: str) -> None:
    feats = htk_corpus(tmp_path)
    streams = """
        features = [ dim = 3 ; contextWindow = 1 ; type = "real" ; scpFile = "$DataDir$/feats.scp" ]
        labels = [ mlfFile = "$DataDir$/labels.mlf" ; labelMappingFile = "$DataDir$/states.list" ; labelDim = 2
                   labelType = "category" ]
    """
    if form == "composite":
        features, labels = streams.strip().split("\n", 1)
        reader = f"""deserializers = (
            [ type = "HTKFeatureDeserializer" ; module = "HTKDeserializers" ; input = [ {features} ] ]
          : [ type = "HTKMLFDeserializer" ; module = "HTKDeserializers" ; input = [ {labels} ] ] )"""
    else:
        reader = f'readerType = "{form}" ; readMethod = "blockRandomize" ; miniBatchMode = "partial"\n{streams}'
    text = f"DataDir = {tmp_path}\nT = [ reader = [ randomize = none ; frameMode = false\n{reader} ] ]"
    out = read_all(load_reader(text, "T.reader"))
    np.testing.assert_array_equal(np.concatenate(out["features"]), np.concatenate(list(feats.values())))
    assert np.concatenate(out["labels"]).argmax(axis=1).tolist() == [0, 0, 0, 1, 1, 1]


def test_legacy_htk_truncation_defaults_to_the_minibatch_size(tmp_path: Path) -> None:
    """HTKMLFReader cut utterances at the SGD section's minibatch size when truncated=true gave no length."""
    htk_corpus(tmp_path)
    text = f"""T = [ SGD = [ minibatchSize = 3 ]
        reader = [ readerType = HTKMLFReader ; truncated = true ; frameMode = false
        features = [ dim = 3 ; scpFile = {tmp_path}/feats.scp ] ] ]"""
    plan = reader_plan(text, "T.reader")
    assert plan.options["truncation_length"] == 3 and not plan.options["frame_mode"]
    with pytest.raises(ConfigError, match="truncationLength"):
        reader_plan(text.replace("minibatchSize = 3", "x = 1"), "T.reader")


def test_legacy_htk_reader_defaults_to_frame_mode(tmp_path: Path) -> None:
    htk_corpus(tmp_path)
    text = f"""reader = [ readerType = HTKMLFReader ; randomize = 450000
        features = [ dim = 3 ; scpFile = {tmp_path}/feats.scp ]
        labels = [ mlfFile = {tmp_path}/labels.mlf ; labelMappingFile = {tmp_path}/states.list ; labelDim = 2 ] ]"""
    plan = reader_plan(text)
    assert plan.options["frame_mode"] and plan.options["randomization_window_in_samples"] == 450000


# --- errors and ignored keys -----------------------------------------------------------------------------------------


def test_unknown_keys_name_the_file_and_line_with_a_suggestion(tmp_path: Path) -> None:
    ctf_file(tmp_path)
    config = tmp_path / "bad.cntk"
    config.write_text(
        f"reader = [\n  readerType = CNTKTextFormatReader\n  file = {tmp_path}/data.ctf\n  randomise = false\n"
        "  input = [ x = [ dim = 2 ; format = dense ] ]\n]\n"
    )
    with pytest.raises(ConfigError, match=rf"{config}:4: unknown key 'randomise' .*did you mean 'randomize'"):
        load_reader(config)
    config.write_text(f"reader = [ readerType = CNTKTextFormatReader ; file = {tmp_path}/data.ctf\n"
                      "  input = [ x = [ dims = 2 ; format = dense ] ] ]")  # fmt: skip
    with pytest.raises(ConfigError, match=r"bad.cntk:2: unknown key 'dims' in CTF stream 'x'; did you mean 'dim'"):
        load_reader(config)


@pytest.mark.parametrize(
    ("reader", "message"),
    [
        ("readerType = CNTKTextFormatReadr", "did you mean 'CNTKTextFormatReader'"),
        ("readerType = UCIFastReader", "not supported by cntkio"),
        ("deserializers = ( [ type = CNTKTextFormatDeserialiser ] )", "did you mean 'CNTKTextFormatDeserializer'"),
        ("deserializers = ( [ type = cntkTextFormatDeserializer ] )", "unknown deserializer type"),
        ("deserializers = ( [ type = LatticeDeserializer ] )", "lattices are not supported"),
        ("deserializers = ( [ type = CNTKTextFormatDeserializer ; module = ImageReader ] )", "CNTKTextFormatReader"),
        ("deserializers = ( [ type = X ; composable = false ] )", "user deserializer"),
        ("readerType = CNTKTextFormatReader ; file = a.ctf", "needs an 'input' section"),
        (
            "deserializers = ( [ type = ImageDeserializer ; file = m.txt ; input = [ f = [ transforms = ( "
            "[ type = Scael ] ) ] ] ] )",
            "did you mean 'Scale'",
        ),
    ],
)
def test_reader_errors(reader: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        reader_plan(f"reader = [ {reader} ]")


def test_a_missing_section_lists_the_reader_sections() -> None:
    text = "Train = [ reader = [ readerType = CNTKTextFormatReader ] ]\nTest = [ reader = [ readerType = X ] ]"
    with pytest.raises(ConfigError, match=r"no section 'Trian'.*reader sections in this config: Train.reader, "):
        load_reader(text, "Trian.reader")


def test_ignored_keys_are_listed_in_one_place_and_logged(tmp_path: Path, caplog: Any) -> None:
    ctf_file(tmp_path)
    assert "miniBatchMode" in IGNORED_KEYS and all(IGNORED_KEYS.values())
    text = (f"reader = [ readerType = CNTKTextFormatReader ; file = {tmp_path}/data.ctf ; miniBatchMode = partial\n"
            "  verbosity = 2 ; input = [ x = [ dim = 2 ; format = dense ] ] ]")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="cntkio.brainscript"):
        reader_plan(text).close()
    assert "miniBatchMode: ignored" in caplog.text and "verbosity: ignored" in caplog.text


def test_predefined_variables_and_config_dir(tmp_path: Path) -> None:
    config = tmp_path / "c.cntk"
    config.write_text("a = $ConfigDir$/x\nb = $DeviceId$")
    loaded = load_config(config)
    assert loaded["a"].text == f"{tmp_path}/x" and loaded["b"].text == "-1"
    assert load_config(config, {"ConfigDir": "/elsewhere"})["a"].text == "/elsewhere/x"


# --- real configs --------------------------------------------------------------------------------------------------

SLU_HANDS_ON = """# SLUHandsOn.cntk-style config (CNTK's Tutorials/SLUHandsOn), its reader sections as CNTK ships them
command = TrainTagger:TestTagger
makeMode = false ; traceLevel = 0 ; deviceId = "auto"
rootDir = "." ; dataDir  = "$rootDir$" ; modelDir = "$rootDir$/Models"
modelPath = "$modelDir$/slu.cmf"
vocabSize = 943 ; numLabels = 129 ; numIntents = 26    # number of words in vocab, slot labels, and intent labels

TrainTagger = {
    action = "train"
    BrainScriptNetworkBuilder = {
        inputDim = $vocabSize$
        labelDim = $numLabels$
        embDim = 150
        hiddenDim = 300
        model = Sequential (
            EmbeddingLayer {embDim} :                            # embedding
            RecurrentLSTMLayer {hiddenDim, goBackwards=false} :  # LSTM
            DenseLayer {labelDim}                                # output layer
        )
        query      = Input {inputDim}
        slotLabels = Input {labelDim}
        z = model (query)
        ce   = CrossEntropyWithSoftmax (slotLabels, z)
        errs = ClassificationError     (slotLabels, z)
        featureNodes    = (query)
        labelNodes      = (slotLabels)
        criterionNodes  = (ce)
        evaluationNodes = (errs)
        outputNodes     = (z)
    }
    SGD = {
        maxEpochs = 8 ; epochSize = 36000
        minibatchSize = 70
        learningRatesPerSample = 0.003*2:0.0015*12:0.0003
        gradUpdateType = "fsAdaGrad"
        gradientClippingWithTruncation = true ; clippingThresholdPerSample = 15.0
        firstMBsToShowResult = 10 ; numMBsToShowResult = 100
    }
    reader = {
        readerType = "CNTKTextFormatReader"
        file = "$DataDir$/atis.train.ctf"
        randomize = true
        input = {
            query        = { alias = "S0" ; dim = $vocabSize$ ;  format = "sparse" }
            intentLabels = { alias = "S1" ; dim = $numIntents$ ; format = "sparse" }
            slotLabels   = { alias = "S2" ; dim = $numLabels$ ;  format = "sparse" }
        }
    }
}

TestTagger = {
    action = "eval"
    modelPath = $modelPath$
    reader = {
        readerType = "CNTKTextFormatReader"
        file = "$DataDir$/atis.test.ctf"
        randomize = false
        input = {
            query        = { alias = "S0" ; dim = $vocabSize$ ;  format = "sparse" }
            intentLabels = { alias = "S1" ; dim = $numIntents$ ; format = "sparse" }
            slotLabels   = { alias = "S2" ; dim = $numLabels$ ;  format = "sparse" }
        }
    }
}
"""


def test_a_tutorial_config_loads_with_its_brainscript_network(tmp_path: Path) -> None:
    ctf_file(
        tmp_path,
        "atis.train.ctf",
        "0 |S0 178:1 |S1 10:1 |S2 128:1\n0 |S0 770:1 |S2 128:1\n1 |S0 178:1 |S1 3:1 |S2 3:1\n",
    )
    config = tmp_path / "SLUHandsOn.cntk"
    config.write_text(SLU_HANDS_ON)
    assert reader_sections(config) == ["TrainTagger.reader", "TestTagger.reader"]
    source = load_reader(config, "TrainTagger.reader", {"DataDir": tmp_path})
    assert source.max_samples == 36000  # the SGD section's epochSize
    assert source.streams.query.shape == (943,) and source.streams.slotLabels.shape == (129,)
    assert sum(len(s) for s in read_all(source, 10)["query"]) >= 3


@pytest.mark.skipif(not (DATASETS / "atis").is_dir(), reason="the shared ATIS dataset is not here")
def test_the_atis_dataset_through_its_tutorial_config(tmp_path: Path) -> None:
    config = tmp_path / "SLUHandsOn.cntk"
    config.write_text(SLU_HANDS_ON)
    source = load_reader(config, "TestTagger.reader", {"DataDir": DATASETS / "atis"}, max_samples=FULL_DATA_SWEEP)
    sequences = 0
    while minibatch := source.next_minibatch(2000):
        sequences += minibatch["query"].num_sequences
    assert sequences == 893


# --- property: writer -> parser round trip ---------------------------------------------------------------------------

_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_SCALARS = st.from_regex(r"[A-Za-z0-9_./\-]{1,12}", fullmatch=True).filter(lambda v: not v.startswith("#"))
_TREES = st.recursive(
    _SCALARS,
    lambda children: st.dictionaries(_NAMES, children, max_size=4, dict_class=dict),
    max_leaves=12,
)


def _write(tree: dict[str, Any], style: Any) -> str:
    """A config text for ``tree`` in a drawn style: brace kind, separator and spacing per section."""
    records = []
    for key, value in tree.items():
        if isinstance(value, dict):
            opener, closer = style.draw(st.sampled_from(["[]", "{}"]))
            records.append(f"{key} = {opener} {_write(value, style)} {closer}")
        else:
            quoted = style.draw(st.booleans())
            records.append(f'{key}="{value}"' if quoted else f"{key} = {value}")
    separator = style.draw(st.sampled_from(["\n", " ; ", ", ", "\n# a comment\n"]))
    return separator.join(records)


def _read(section: Any, tree: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _read(section.section(key), value) if isinstance(value, dict) else section[key].text
        for key, value in tree.items()
    }


@settings(max_examples=200, deadline=None)
@given(tree=st.dictionaries(_NAMES, _TREES, max_size=5), style=st.data())
def test_written_configs_parse_back(tree: dict[str, Any], style: Any) -> None:
    unique = {}  # keys are case-insensitive: keep one spelling of each
    for key, value in tree.items():
        if key.lower() not in {k.lower() for k in unique} and (not isinstance(value, dict) or _case_unique(value)):
            unique[key] = value
    assert _read(parse_config(_write(unique, style)), unique) == unique


def _case_unique(tree: dict[str, Any]) -> bool:
    keys = [k.lower() for k in tree]
    return len(keys) == len(set(keys)) and all(_case_unique(v) for v in tree.values() if isinstance(v, dict))
