"""BrainScript configs that are hostile or odd (issue 24 §2.7): a clear ``ConfigError`` naming the file and line, in
bounded time. Nesting and variable chains parse in linear time; ``$v$$v$`` expansion and ``NUMBER*COUNT``
repetition have limits; deep nesting, huge counts and cycles are errors, never ``RecursionError``,
``MemoryError``, ``OverflowError`` or ``IndexError``.

Time is bounded by size, not by a clock: each case that was quadratic or exponential runs in a child interpreter
at a size that took minutes to hours before (or never ended), under a timeout ten to a hundred times what it
takes now.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cntkio import ConfigError
from cntkio._src.config.syntax import MAX_EXPANDED_CHARS, MAX_NESTING, MAX_REPEATED_NUMBERS, parse_config
from cntkio.brainscript import load_config, reader_plan


def run_child(code: str, timeout: float = 300) -> str:
    """Runs ``code`` in a fresh interpreter and returns what it printed; it must end within ``timeout`` seconds
    (generous: the point is that it ends, where before it ran for hours)."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


# --- nesting -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("brace", ["[", "{", "("])
def test_nesting_deeper_than_the_limit_names_the_file_and_line(brace: str) -> None:
    closing = {"[": "]", "{": "}", "(": ")"}[brace]
    depth = 100_000
    text = "x = 1\n\na = " + brace * depth + closing * depth + "\ny = 2"
    with pytest.raises(ConfigError, match=rf"^<config>:3: blocks are nested more than {MAX_NESTING} deep"):
        parse_config(text)["y"]


def test_nesting_at_the_limit_reads_its_innermost_value() -> None:
    depth = MAX_NESTING
    text = "a = " + "[ b = " * (depth - 1) + "[ x = 7 ]" + " ]" * (depth - 1)
    section = parse_config(text).path(".".join(["a"] + ["b"] * (depth - 1)))
    assert section["x"].text == "7"


def test_deep_nesting_over_a_large_block_parses_in_linear_time() -> None:
    # Each level used to scan (and copy) everything inside it: 1000 levels over 4 MB took hours. Now every character
    # is scanned by the one section it is at the top level of.
    output = run_child(
        f"""
        from cntkio._src.config.syntax import parse_config
        depth = {MAX_NESTING}
        payload = "; ".join(f"k{{i}} = v{{i}}" for i in range(400_000))
        text = "a = " + "[ b = " * (depth - 1) + "[ " + payload + " ]" + " ]" * (depth - 1)
        section = parse_config(text).path(".".join(["a"] + ["b"] * (depth - 1)))
        print(section["k399999"].text, len(section.keys()))
        """,
    )
    assert output == "v399999 400000"


def test_a_long_unquoted_block_and_many_comments_parse_in_linear_time() -> None:
    output = run_child(
        """
        from cntkio._src.config.syntax import parse_config
        text = "# c\\n" * 500_000 + "a = [ " + "x" * 4_000_000 + " = 1 ]\\n" + "b = 2 # " + "#" * 4_000_000
        config = parse_config(text)
        print(config["b"].text, config.section("a").keys()[0] == "x" * 4_000_000)
        """,
    )
    assert output == "2 True"


# --- variables ---------------------------------------------------------------------------------------------------


def test_a_long_variable_chain_resolves() -> None:
    n = 100_000
    text = "v0 = /data\n" + "\n".join(f"v{i} = $v{i - 1}$" for i in range(1, n)) + f"\nfile = $v{n - 1}$/x.ctf"
    assert parse_config(text)["file"].text == "/data/x.ctf"


def test_a_long_variable_cycle_is_a_config_error() -> None:
    n = 100_000
    text = "\n".join(f"v{i} = $v{(i + 1) % n}$" for i in range(n))
    chain = r"v0 -> v1 -> v2 -> \.\.\. -> v99998 -> v99999 -> v0; 100000 variables"
    with pytest.raises(ConfigError, match=rf"^<config>:1: v0: variable \$v0\$ refers to itself \({chain}\)$"):
        _ = parse_config(text)["v0"].text


def test_a_short_cycle_names_its_variables() -> None:
    with pytest.raises(ConfigError, match=r"^<config>:1: a: variable \$a\$ refers to itself \(a -> b -> a\)$"):
        _ = parse_config("a = $b$\nb = $a$")["a"].text


def test_a_name_met_twice_is_not_a_cycle() -> None:
    # t.c -> t.a -> (top) b -> (top) a: the name a twice, two different variables
    config = parse_config("a = 1\nb = $a$\nt = [ a = $b$ ; c = $a$ ]")
    assert config.section("t")["c"].text == "1"


def test_doubling_variables_stop_at_the_expansion_limit() -> None:
    # v64 would be 2^64 characters; it used to run until memory ran out (2^k work for k levels).
    output = run_child(
        """
        from cntkio._src.config.syntax import parse_config
        from cntkio import ConfigError
        text = "v0 = ab\\n" + "\\n".join(f"v{i} = $v{i - 1}$$v{i - 1}$" for i in range(1, 65)) + "\\nfile = $v64$"
        try:
            parse_config(text)["file"].text
        except ConfigError as error:
            print(error)
        """,
    )
    assert output.startswith("<config>:")
    assert f"expands to more than {MAX_EXPANDED_CHARS:,} characters" in output and "file" in output


def test_doubling_an_empty_variable_takes_linear_time() -> None:
    # Nothing grows, but each level used to expand the one below twice: 2^60 expansions.
    output = run_child(
        """
        from cntkio._src.config.syntax import parse_config
        text = 'v0 = ""\\n' + "\\n".join(f"v{i} = $v{i - 1}$$v{i - 1}$" for i in range(1, 61)) + "\\nfile = x$v60$y"
        print(parse_config(text)["file"].text)
        """,
    )
    assert output == "xy"


def test_a_whole_value_reference_chain_and_cycle_as_sections() -> None:
    n = 50_000
    text = "s0 = [ x = 1 ]\n" + "\n".join(f"s{i} = $s{i - 1}$" for i in range(1, n))
    assert parse_config(text).section(f"s{n - 1}")["x"].text == "1"
    with pytest.raises(ConfigError, match=r"<config>:1: a: expected a \[ \.\.\. \] or \{ \.\.\. \} block"):
        parse_config("a = $b$\nb = $a$").section("a")


# --- numbers -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1*1e12", rf"repeats 1000000000000 times; at most {MAX_REPEATED_NUMBERS:,} numbers"),
        ("0.5*1000:1*1e18", rf"at most {MAX_REPEATED_NUMBERS:,} numbers"),
        ("1*1e400", r"COUNT must be a whole number >= 1, got '1e400'"),
        ("1*inf", r"COUNT must be a whole number >= 1, got 'inf'"),
        ("1*0", r"COUNT must be a whole number >= 1, got '0'"),
        ("1*-2", r"COUNT must be a whole number >= 1, got '-2'"),
        ("1*2.5", r"COUNT must be a whole number >= 1, got '2.5'"),
        ("1*nan", r"COUNT must be a whole number >= 1, got 'nan'"),
        ("()", r"expected at least one number"),
    ],
)
def test_repetition_limits_name_the_line(value: str, message: str) -> None:
    config = parse_config(f"a = 1\nr = {value}")
    with pytest.raises(ConfigError, match=rf"^<config>:2: r: .*{message}"):
        config["r"].as_numbers()


def test_a_count_within_the_limit_repeats() -> None:
    numbers = parse_config(f"r = 0.5*{MAX_REPEATED_NUMBERS - 1}:2")["r"].as_numbers()
    assert len(numbers) == MAX_REPEATED_NUMBERS and numbers[-2:] == [0.5, 2.0]


@pytest.mark.parametrize(
    ("value", "method", "message"),
    [
        ("1" + "0" * 5000, "as_int", r"expected a 64-bit integer, got '1000000000\d*'\.\.\. \(5,001 characters\)"),
        ("9223372036854775808", "as_int", r"expected a 64-bit integer, got '9223372036854775808'"),
        ("inf", "as_ints", r"expected whole numbers, got 'inf'"),
        ("nan:1", "as_ints", r"expected whole numbers, got 'nan:1'"),
        ("1e400", "as_ints", r"expected whole numbers, got '1e400'"),
        ("1" + "0" * 5000, "as_ints", r"expected whole numbers"),
    ],
    ids=["5000 digits", "2^63", "inf", "nan", "1e400", "5000 digits as_ints"],
)
def test_numbers_no_machine_holds_are_config_errors(value: str, method: str, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"^<config>:1: n: {message}"):
        getattr(parse_config(f"n = {value}")["n"], method)()


READER = """
reader = [
    readerType = CNTKTextFormatReader
    file = "{file}"
    {extra}
    input = [ x = [ dim = 1 ; format = dense ] ]
]
"""


@pytest.mark.parametrize(
    ("extra", "line", "message"),
    [
        ("truncated = true ; truncationLength = 1*0", 5, "COUNT must be a whole number"),
        ("truncated = true ; truncationLength = ()", 5, "expected at least one number"),
        ("epochSize = 1" + "0" * 5000, 5, "expected a 64-bit integer"),
        ("randomize = 1" + "0" * 5000, 5, "expected a 64-bit integer"),
        ("randomize = \u00b2", 5, "expected a boolean"),
    ],
    ids=["truncation 1*0", "truncation ()", "epochSize 5000 digits", "randomize 5000 digits", "randomize superscript"],
)
def test_reader_options_out_of_range_name_the_line(tmp_path: Path, extra: str, line: int, message: str) -> None:
    data = tmp_path / "x.ctf"
    data.write_text("|x 1\n")
    config = tmp_path / "r.cntk"
    config.write_text(READER.format(file=data, extra=extra))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))}:{line}: .*{message}"):
        reader_plan(config).close()


def test_a_crop_size_of_no_numbers_names_the_line(tmp_path: Path) -> None:
    config = tmp_path / "i.cntk"
    config.write_text(
        "reader = [\n deserializers = ( [\n  type = ImageDeserializer ; file = map.txt\n"
        "  input = [ f = [ transforms = ( [ type = Crop ; cropSize = 3*0 ] ) ] ; l = [ labelDim = 2 ] ]\n ] )\n]\n"
    )
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))}:4: cropSize: .*COUNT must be a whole number"):
        reader_plan(config)


def test_a_config_file_of_hostile_nesting_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.cntk"
    path.write_text("# deep\nreader = " + "[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:2: blocks are nested more than"):
        load_config(path).keys()
