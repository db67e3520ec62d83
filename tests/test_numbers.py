"""CTF number grammar (spec §6.1) and correctly rounded values in float32 and float64."""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cntkio import MaxErrorsExceeded, StreamDef, StreamDefs

VALUE = StreamDefs(v=StreamDef(field="v", shape=1))
SPARSE = StreamDefs(s=StreamDef(field="s", shape=4, is_sparse=True))
PRECISIONS = {"float": np.float32, "double": np.float64}

ACCEPTED = {
    "1": 1.0,
    "-123": -123.0,
    "+7": 7.0,
    "02.0": 2.0,
    "45.": 45.0,
    "6.78": 6.78,
    "9.10e-11": 9.10e-11,
    "1E5": 1e5,
    "-1.5e+2": -150.0,
    "0": 0.0,
    "007": 7.0,
    "1e0": 1.0,
    "1.5E-0": 1.5,
    "00000000000000000000000000001": 1.0,
}
REJECTED = [".5", "-.5", "+.5", "1.e5", "inf", "-inf", "nan", "Infinity", "0x1F", "1,5", "2.0f", "2#0",
            "1e", "1e+", "1e-", "1_000", "3.0abc", "--1", "+-1", "-", "+", "1..5", "1.5.2", "e5", "1e5.5"]  # fmt: skip


def bits(values: np.ndarray) -> list[int]:
    """IEEE bit patterns (exact comparison; -0.0 differs from 0.0)."""
    array = np.ascontiguousarray(values)
    return array.view({4: np.uint32, 8: np.uint64}[array.itemsize]).ravel().tolist()


def expected_value(text: str, dtype: type) -> np.floating | None:
    """What the reader must produce: float(text) rounded to the dtype, or None when out of range."""
    value = float(text)
    with np.errstate(over="ignore"):
        result = dtype(value)
    return None if np.isinf(result) else result


def assert_read_as(value: np.ndarray, text: str, dtype: type) -> None:
    """The value read for ``text`` is float(text) in ``dtype`` bit for bit, or nothing when out of range."""
    expected = expected_value(text, dtype)
    if expected is None:
        assert value.size == 0, (text, dtype)
    else:
        assert bits(value) == bits(np.array([expected])), (text, dtype)


def read_values(ctf, texts: list[str], precision: str) -> list[np.ndarray]:
    """Reads one number per line; returns each line's parsed values (empty when the number failed)."""
    content = "".join(f"|v {text}\n" for text in texts)
    parsed = ctf.read(content, VALUE, precision=precision, max_errors=10 * len(texts), trace_level=0)
    assert len(parsed.streams["v"]) == len(texts)
    return [sequence.ravel() for sequence in parsed.streams["v"]]


# --------------------------------------------------------------------------------- grammar
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("text", ACCEPTED)
def test_accepted(ctf, text, precision):
    dtype = PRECISIONS[precision]
    parsed = ctf.read(f"|v {text}\n|v {text}", VALUE, precision=precision)
    assert bits(parsed.streams["v"][0]) == bits(np.array([ACCEPTED[text]], dtype=dtype))
    assert bits(parsed.streams["v"][1]) == bits(np.array([ACCEPTED[text]], dtype=dtype))


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_in_dense_samples(ctf, text):
    deserializer = ctf.deserializer(f"|v {text}\n", VALUE)
    with pytest.raises(MaxErrorsExceeded, match="malformed number"):
        deserializer.get_chunk(0)


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_in_sparse_values(ctf, text):
    deserializer = ctf.deserializer(f"|s 1:{text}\n", SPARSE)
    with pytest.raises(MaxErrorsExceeded, match="malformed number"):
        deserializer.get_chunk(0)


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_number_drops_only_its_sample(ctf, text):
    streams = StreamDefs(v=StreamDef(field="v", shape=1), w=StreamDef(field="w", shape=1))
    parsed = ctf.read(f"|w 1 |v {text}\n|w 2 |v 3\n", streams, max_errors=1)
    assert parsed.dense("w") == [[[1.0]], [[2.0]]]
    assert parsed.dense("v") == [[], [[3.0]]]
    assert parsed.deserializer.errors.count == 1


def test_error_points_at_the_offending_byte(ctf):
    deserializer = ctf.deserializer("|v 1\n|v 12x\n", VALUE)
    with pytest.raises(MaxErrorsExceeded) as info:
        deserializer.get_chunk(0)
    assert (info.value.line, info.value.column, info.value.offset) == (2, 6, 10)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sparse_values(ctf, precision):
    dtype = PRECISIONS[precision]
    parsed = ctf.read("|s 0:-1.5e+2 1:45. 2:+7 3:9.10e-11\n", SPARSE, precision=precision)
    assert parsed.sparse("s") == [[[(0, -150.0), (1, 45.0), (2, 7.0), (3, float(dtype(9.10e-11)))]]]


# --------------------------------------------------------------------------------- rounding
HARD_CASES = [
    # halfway cases between two doubles
    "9007199254740993",
    "9007199254740995",
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124",
    "1.00000000000000011102230246251565404236316680908203126",
    "1.0000000000000002220446049250313080847263336181640625",
    # halfway cases between two floats (double then float32 rounding, as np.float32(float(s)))
    "16777217",
    "16777219",
    "1.00000005960464477539062500000001",
    "3.4028235e38",
    "3.4028235677973366e38",
    "-3.4028234663852886e38",
    # 17 and more significant digits
    "0.1000000000000000055511151231257827021181583404541015625",
    "3.14159265358979323846264338327950288419716939937510582097494459",
    "1234567890123456789012345678901234567890",
    "0.000000000000000000000000000000000000001234567890123456789",
    "123456789012345678901234567890e-40",
    "7.2057594037927933e16",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999999999999999999999e-49",
    # denormals and the smallest normals
    "4.9e-324",
    "5e-324",
    "2.4703282292062327e-324",
    "2.4703282292062328e-324",
    "2.2250738585072011e-308",
    "2.2250738585072012e-308",
    "2.2250738585072014e-308",
    "1.4e-45",
    "7.006492321624086e-46",
    "7.0064923216240862e-46",
    "1.1754943508222875e-38",
    "1.1754942e-38",
    # largest doubles
    "1.7976931348623157e308",
    "1.7976931348623158e308",
    "-1.7976931348623157e+308",
    # underflow to zero, keeping the sign
    "1e-400",
    "-1e-400",
    "1e-99999999999999999999",
    "-0.0000001e-99999",
    "0e999",
    "-0e-999",
    "0.000000000000000000000000000000000000000000000000000000000000",
    # exponents of odd shapes
    "1e0000000000000000000000000000005",
    "1000000000000000000000000000000e-30",
    "0.00000000000000000000000000000000000000000000000000000001e+56",
]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_hard_cases_round_like_float(ctf, precision):
    dtype = PRECISIONS[precision]
    values = read_values(ctf, HARD_CASES, precision)
    for text, value in zip(HARD_CASES, values):
        assert_read_as(value, text, dtype)


@pytest.mark.parametrize(
    ("text", "float32_ok", "float64_ok"),
    [("1e999", False, False), ("-1e999", False, False), ("1e99999999999999999999", False, False),
     ("1.7976931348623159e308", False, False), ("3.5e38", False, True), ("-3.5e38", False, True),
     ("3.4028235e38", True, True), ("3.4028236e38", False, True), ("1e308", False, True)],
)  # fmt: skip
def test_out_of_range_values_are_errors(ctf, text, float32_ok, float64_ok):
    for precision, ok in (("float", float32_ok), ("double", float64_ok)):
        deserializer = ctf.deserializer(f"|v {text}\n", VALUE, precision=precision)
        if ok:
            value = deserializer.get_chunk(0)["v"].values
            assert bits(value) == bits(np.array([expected_value(text, PRECISIONS[precision])])), precision
        else:
            with pytest.raises(MaxErrorsExceeded, match="out of range"):
                deserializer.get_chunk(0)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_underflow_gives_zero_with_the_sign(ctf, precision):
    parsed = ctf.read("|v 1e-400\n|v -1e-400\n|v -1e-50\n|v 1e-50\n", VALUE, precision=precision)
    values = np.concatenate([s.ravel() for s in parsed.streams["v"]])
    zero = precision == "float"  # 1e-50 is below float32's smallest denormal
    assert values.tolist() == [0.0, 0.0, 0.0 if zero else -1e-50, 0.0 if zero else 1e-50]
    assert np.signbit(values).tolist() == [False, True, True, False]
    assert parsed.deserializer.errors.count == 0


@st.composite
def ctf_numbers(draw: st.DrawFn) -> str:
    """A number in the CTF grammar: [+-]? DIGITS ("." DIGITS*)? ([eE] [+-]? DIGITS)?, 1..40 digits."""
    digits = st.text("0123456789", min_size=1, max_size=40)
    sign = draw(st.sampled_from(["", "-", "+"]))
    integer = draw(digits)
    fraction = draw(st.none() | st.text("0123456789", max_size=40))
    text = sign + integer
    if fraction is not None:
        text += "." + fraction
    if fraction != "" and draw(st.booleans()):  # '45.e5' is not a number
        exponent = draw(st.integers(-30, 30) | st.integers(-400, 400) | st.integers(-(10**6), 10**6))
        exponent_sign = "-" if exponent < 0 else draw(st.sampled_from(["", "+"]))
        text += draw(st.sampled_from("eE")) + exponent_sign + str(abs(exponent))
    return text


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(ctf_numbers(), min_size=1, max_size=30))
def test_values_are_correctly_rounded(ctf_session, texts):
    for precision, dtype in PRECISIONS.items():
        values = read_values(ctf_session, texts, precision)
        for text, value in zip(texts, values):
            assert_read_as(value, text, dtype)


@st.composite
def near_halfway(draw: st.DrawFn) -> str:
    """Decimal strings very close to the midpoint between two adjacent doubles or floats."""
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    info = np.finfo(dtype)
    low = dtype(draw(st.floats(float(info.tiny) / 2**10, float(info.max) / 2, allow_nan=False, allow_infinity=False)))
    high = np.nextafter(low, dtype(np.inf))
    offset = draw(st.sampled_from([0, 1, -1]))
    precision = draw(st.integers(17, 60))
    with localcontext() as context:
        context.prec = 2000
        middle = (Decimal(float(low)) + Decimal(float(high))) / 2
        return format(middle + offset * Decimal(10) ** (middle.adjusted() - precision), "e")


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(near_halfway(), min_size=1, max_size=20))
def test_near_halfway_values_are_correctly_rounded(ctf_session, texts):
    for precision, dtype in PRECISIONS.items():
        values = read_values(ctf_session, texts, precision)
        for text, value in zip(texts, values):
            assert_read_as(value, text, dtype)
