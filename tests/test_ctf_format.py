"""The CTF format rules of spec/ctf-format.md, as cntkio implements them (fixed behaviour by default)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from cntkio import ConfigError, FormatError, MaxErrorsExceeded, StreamDef, StreamDefs

A2 = StreamDefs(a=StreamDef(field="a", shape=2))
AB = StreamDefs(a=StreamDef(field="a", shape=2), b=StreamDef(field="b", shape=5, is_sparse=True))
# spec §13: a dense dim 3, b sparse dim 5
SPEC13 = StreamDefs(a=StreamDef(field="a", shape=3), b=StreamDef(field="b", shape=5, is_sparse=True))


def defining(optional: bool = False) -> dict:
    """Streams a (dense, defines_mb_size) and b (sparse)."""
    return {
        "streams": StreamDefs(
            a=StreamDef(field="a", shape=2, defines_mb_size=True), b=StreamDef(field="b", shape=5, is_sparse=True)
        ),
        "optional_inputs": optional,
    }


# --------------------------------------------------------------------------------------------- modes
class TestLineMode:
    def test_first_byte_bar_selects_line_mode_and_later_ids_are_ignored(self, ctf):
        # spec §13, second example
        parsed = ctf.read("|x 1 2\n5 |x 3 4\n", StreamDefs(x=StreamDef(field="x", shape=2)))
        assert parsed.deserializer.describe()["mode"] == "line"
        assert parsed.keys == [0, 1]
        assert parsed.lengths == [1, 1]
        assert parsed.dense("x") == [[[1, 2]], [[3, 4]]]

    def test_digits_directly_before_bar_are_skipped(self, ctf):
        parsed = ctf.read("|a 1 2\n123|a 3 4\n7 |a 5 6\n", A2)
        assert parsed.keys == [0, 1, 2]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[5, 6]]]

    def test_skip_sequence_ids_makes_every_line_a_sequence(self, ctf):
        parsed = ctf.read("1 |a 1 2\n1 |a 3 4\n2 |a 5 6\n", A2, skip_sequence_ids=True)
        assert parsed.deserializer.describe()["mode"] == "line"
        assert parsed.keys == [0, 1, 2]
        assert parsed.lengths == [1, 1, 1]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[5, 6]]]

    def test_without_skip_sequence_ids_the_same_file_groups_by_id(self, ctf):
        parsed = ctf.read("1 |a 1 2\n1 |a 3 4\n2 |a 5 6\n", A2)
        assert parsed.deserializer.describe()["mode"] == "numeric"
        assert parsed.keys == [1, 2]
        assert parsed.lengths == [2, 1]

    def test_keys_are_physical_line_numbers_counting_skipped_lines(self, ctf):
        text = "\n \n|a 1 2\n\n|# comment only\n|a 3 4\n\t\n|a 5 6\n"
        parsed = ctf.read(text, A2)
        assert parsed.keys == [2, 5, 7]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[5, 6]]]

    def test_blank_and_comment_lines_are_skipped_not_fatal(self, ctf):
        # spec README item 2 (fixed): blank lines, comment-only lines and a trailing blank line are skipped
        parsed = ctf.read("|a 1 2\n\n|# c\n|a 3 4\n\n\n", A2)
        assert parsed.lengths == [1, 1]
        assert parsed.deserializer.errors.count == 0
        assert parsed.deserializer.describe()["skipped_lines"] == 4

    def test_compat_keeps_blank_lines_as_sequences_which_then_fail(self, ctf):
        with pytest.raises(MaxErrorsExceeded, match="missing"):
            ctf.read("|a 1 2\n\n|a 3 4\n", A2, compat=True)

    def test_line_with_only_unknown_inputs_is_skipped(self, ctf):
        parsed = ctf.read("|a 1 2\n|zz 9\n|a 3 4\n", A2)
        assert parsed.keys == [0, 2]
        assert parsed.deserializer.errors.count == 0


class TestIdMode:
    def test_ids_group_lines_and_lines_without_id_continue(self, ctf):
        text = "1 |a 1 2\n1 |a 3 4\n2 |a 5 6\n |a 7 8\n\t|a 9 10\n|a 11 12\n3|a 13 14\n"
        parsed = ctf.read(text, A2)
        assert parsed.deserializer.describe()["mode"] == "numeric"
        assert parsed.keys == [1, 2, 3]
        assert parsed.lengths == [2, 4, 1]
        assert parsed.dense("a") == [
            [[1, 2], [3, 4]],
            [[5, 6], [7, 8], [9, 10], [11, 12]],
            [[13, 14]],
        ]

    def test_repeated_id_after_another_starts_a_new_sequence_with_a_warning(self, ctf, caplog):
        with caplog.at_level(logging.WARNING, logger="cntkio"):
            parsed = ctf.read("100 |a 1 1\n200 |a 2 2\n100 |a 3 3\n", A2)
        assert parsed.keys == [100, 200, 100]
        assert parsed.dense("a") == [[[1, 1]], [[2, 2]], [[3, 3]]]
        assert any("more than one place" in r.getMessage() for r in caplog.records)

    def test_blank_and_comment_lines_continue_the_sequence(self, ctf):
        parsed = ctf.read("1 |a 1 2\n\n|# note\n1\n1 |a 3 4\n2 |a 5 6\n", A2)
        assert parsed.keys == [1, 2]
        assert parsed.lengths == [2, 1]
        assert parsed.deserializer.errors.count == 0
        assert parsed.dense("a") == [[[1, 2], [3, 4]], [[5, 6]]]

    def test_largest_unsigned_64_bit_id(self, ctf):
        parsed = ctf.read("18446744073709551615 |a 1 2\n0 |a 3 4\n", A2)
        assert parsed.keys == [2**64 - 1, 0]

    def test_id_overflow_is_fatal(self, ctf):
        with pytest.raises(FormatError, match="64-bit"):
            ctf.read("18446744073709551616 |a 1 2\n", A2, max_errors=100)

    def test_leading_zeros_in_ids_give_the_same_key(self, ctf):
        parsed = ctf.read("007 |a 1 2\n7 |a 3 4\n", A2)
        assert parsed.keys == [7]
        assert parsed.lengths == [2]


class TestTextIds:
    def test_symbolic_ids_are_string_keys(self, ctf):
        text = "abc |a 1 2\nabc |a 3 4\nx-y\t|a 5 6\n|a 7 8\nq|a 9 10\n42 |a 0 1\n"
        parsed = ctf.read(text, A2)
        assert parsed.deserializer.describe()["mode"] == "text"
        assert parsed.keys == ["abc", "x-y", "q", "42"]
        assert parsed.lengths == [2, 2, 1, 1]
        assert parsed.dense("a") == [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10]], [[0, 1]]]
        assert parsed.deserializer.errors.count == 0

    def test_utf8_ids(self, ctf):
        parsed = ctf.read("schön |a 1 2\n日本 |a 3 4\n", A2)
        assert parsed.keys == ["schön", "日本"]

    def test_non_utf8_id_bytes_are_kept(self, ctf):
        parsed = ctf.read(b"k\xc3\x28 |a 1 2\nk\xc3\x28 |a 3 4\nz |a 5 6\n", A2)
        assert parsed.keys == ["k\\xc3(", "z"]
        assert parsed.lengths == [2, 1]


# ---------------------------------------------------------------------------------- sequence lengths
class TestSequenceLength:
    def test_length_is_the_longest_stream_not_the_line_count(self, ctf):
        # spec README item 1 (fixed): a class label on its own line does not make the sequence longer
        text = "1 |a 1 2 |b 0:1\n1 |a 3 4\n1 |b 4:2\n2 |a 5 6 |b\n"
        parsed = ctf.read(text, AB)
        assert parsed.lengths == [2, 1]
        assert parsed.deserializer.errors.count == 0
        assert parsed.dense("a") == [[[1, 2], [3, 4]], [[5, 6]]]
        assert parsed.sparse("b") == [[[(0, 1.0)], [(4, 2.0)]], [[]]]

    def test_compat_length_is_the_line_count(self, ctf):
        parsed = ctf.read("1 |a 1 2 |b 0:1\n1 |a 3 4\n1 |b 4:2\n2 |a 5 6 |b\n", AB, compat=True)
        assert parsed.lengths == [3, 1]

    def test_blank_lines_do_not_count(self, ctf):
        parsed = ctf.read("1 |a 1 2\n\n1 |# c\n1 |a 3 4\n", A2)
        assert parsed.lengths == [2]

    def test_missing_input_is_an_error_unless_optional(self, ctf):
        text = "1 |a 1 2 |b 0:1\n2 |a 3 4\n"
        with pytest.raises(MaxErrorsExceeded, match="missing"):
            ctf.read(text, AB)
        parsed = ctf.read(text, AB, optional_inputs=True)
        assert parsed.keys == [1, 2]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]]]
        assert parsed.sparse("b") == [[[(0, 1.0)]], []]

    def test_sequence_with_a_missing_input_is_dropped_when_max_errors_allows(self, ctf):
        parsed = ctf.read("1 |a 1 2 |b 0:1\n2 |a 3 4\n3 |a 5 6 |b\n", AB, max_errors=1)
        assert parsed.keys == [1, 3]
        assert parsed.dense("a") == [[[1, 2]], [[5, 6]]]
        assert parsed.deserializer.errors.count == 1


class TestDefinesMbSize:
    def test_line_mode_drops_lines_without_the_defining_stream(self, ctf):
        text = "|a 1 2 |b 1:1\n|b 2:2\n\n|# x\n|a 3 4 |b\n|ab 9 |b 3:3\n|a\t5 6|b\n"
        parsed = ctf.read(text, **defining())
        assert parsed.keys == [0, 4, 6]
        assert parsed.lengths == [1, 1, 1]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[5, 6]]]
        assert parsed.sparse("b") == [[[(1, 1.0)]], [[]], [[]]]
        assert parsed.deserializer.describe()["skipped_lines"] == 4

    def test_alias_must_be_followed_by_a_delimiter(self, ctf):
        # '|a' followed by a space, tab, '|' or control byte marks a line; '|ab' does not
        parsed = ctf.read("|a 1 2\n|ab 1\n|a\t3 4\n|a|b 1:1\n|a\r\n", **defining(optional=True))
        assert parsed.keys == [0, 2, 3, 4]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]], [[0, 0]], [[0, 0]]]

    def test_id_mode_length_counts_lines_with_the_defining_stream(self, ctf):
        text = "1 |a 1 2 |b 1:1\n1 |b 2:2\n1 |b 3:3\n1 |a 3 4\n3 |a 0 0 |b\n"
        parsed = ctf.read(text, **defining())
        assert parsed.keys == [1, 3]
        assert parsed.lengths == [2, 1]
        assert parsed.dense("a") == [[[1, 2], [3, 4]], [[0, 0]]]
        assert parsed.sparse("b") == [[[(1, 1.0)], [(2, 2.0)], [(3, 3.0)]], [[]]]

    def test_label_on_its_own_line(self, ctf):
        streams = StreamDefs(
            w=StreamDef(field="w", shape=1, defines_mb_size=True), y=StreamDef(field="y", shape=3, is_sparse=True)
        )
        parsed = ctf.read("1 |w 1\n1 |w 2\n1 |w 3\n1 |y 2:1\n2 |w 4 |y 0:1\n", streams)
        assert parsed.lengths == [3, 1]
        assert parsed.deserializer.errors.count == 0
        assert parsed.sparse("y") == [[[(2, 1.0)]], [[(0, 1.0)]]]

    def test_id_mode_sequence_without_the_defining_stream_is_dropped(self, ctf, caplog):
        with caplog.at_level(logging.WARNING, logger="cntkio"):
            parsed = ctf.read("1 |a 1 2\n2 |b 1:1\n2 |b 2:2\n3 |a 3 4 |b\n", **defining(optional=True))
        assert parsed.keys == [1, 3]
        assert parsed.deserializer.describe()["skipped_sequences"] == 1
        assert any("without the defining stream" in r.getMessage() for r in caplog.records)

    def test_only_one_stream_can_define_the_size(self, ctf):
        streams = StreamDefs(
            a=StreamDef(field="a", shape=1, defines_mb_size=True), b=StreamDef(field="b", shape=1, defines_mb_size=True)
        )
        with pytest.raises(ConfigError):
            ctf.deserializer("|a 1 |b 2\n", streams)


# ---------------------------------------------------------------------------------- file level
class TestFileLevel:
    def test_utf8_bom_is_skipped(self, ctf):
        parsed = ctf.read(b"\xef\xbb\xbf|a 1 2\n|a 3 4\n", A2)
        assert parsed.keys == [0, 1]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]]]

    def test_utf8_bom_before_a_numeric_id(self, ctf):
        parsed = ctf.read(b"\xef\xbb\xbf7 |a 1 2\n", A2)
        assert parsed.keys == [7]

    def test_partial_bom_bytes_are_data(self, ctf):
        # [fix] CNTK pops matching BOM bytes one by one; here EF BB are kept (a text id)
        parsed = ctf.read(b"\xef\xbb|a 1 2\n", A2)
        assert parsed.deserializer.describe()["mode"] == "text"
        assert parsed.keys == ["\\xef\\xbb"]
        assert parsed.dense("a") == [[[1, 2]]]

    def test_leading_blank_lines_are_skipped_in_id_mode(self, ctf):
        parsed = ctf.read("\n\r\n  \t\n7 |a 1 2\n|a 3 4\n", A2)
        assert parsed.keys == [7]
        assert parsed.dense("a") == [[[1, 2], [3, 4]]]

    def test_crlf_line_ends(self, ctf):
        parsed = ctf.read("1 |a 1 2 |b 0:1\r\n1 |a 3 4\r\n2 |a 5 6 |b\r\n", AB)
        assert parsed.keys == [1, 2]
        assert parsed.dense("a") == [[[1, 2], [3, 4]], [[5, 6]]]
        assert parsed.sparse("b") == [[[(0, 1.0)]], [[]]]

    def test_lone_cr_does_not_end_a_line(self, ctf):
        parsed = ctf.read("|a 1 2\r|b 3:1\n|a 3 4 |b\n", AB)
        assert parsed.keys == [0, 1]
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]]]
        assert parsed.sparse("b") == [[[(3, 1.0)]], [[]]]

    @pytest.mark.parametrize("precision", ["float", "double"])
    def test_missing_final_newline(self, ctf, precision):
        parsed = ctf.read("|a 1 2 |b 1:1\n|a 3.5 -4.25 |b 2:2", AB, precision=precision)
        assert parsed.dense("a") == [[[1, 2]], [[3.5, -4.25]]]
        assert parsed.sparse("b") == [[[(1, 1.0)]], [[(2, 2.0)]]]

    def test_short_dense_sample_on_a_final_row_without_newline_is_padded(self, ctf):
        # spec README item 8 (fixed): the last row is padded like every other row
        parsed = ctf.read("|a 1 2 3\n|a 4", StreamDefs(a=StreamDef(field="a", shape=3)))
        assert parsed.dense("a") == [[[1, 2, 3]], [[4, 0, 0]]]
        assert parsed.streams["a"][1].shape == (1, 3)

    def test_empty_sparse_sample_at_end_of_file(self, ctf):
        parsed = ctf.read("|a 1 2 |b 1:1\n|a 3 4 |b", AB)
        assert parsed.sparse("b") == [[[(1, 1.0)]], [[]]]

    def test_tabs_and_spaces_are_interchangeable(self, ctf):
        parsed = ctf.read("1\t|a\t1\t 2 \t|b\t0:1   4:2\t\n1 |a 3  4|b 2:3\n", AB)
        assert parsed.dense("a") == [[[1, 2], [3, 4]]]
        assert parsed.sparse("b") == [[[(0, 1.0), (4, 2.0)], [(2, 3.0)]]]

    def test_dense_value_may_be_followed_directly_by_a_bar(self, ctf):
        streams = StreamDefs(a=StreamDef(field="a", shape=1), b=StreamDef(field="b", shape=1))
        parsed = ctf.read("|a 1.0|b 2\n", streams)
        assert parsed.dense("a") == [[[1.0]]]
        assert parsed.dense("b") == [[[2.0]]]

    def test_samples_may_come_in_any_order_on_a_row(self, ctf):
        parsed = ctf.read("|b 3:1 |a 1 2\n|a 3 4 |b\n", AB)
        assert parsed.dense("a") == [[[1, 2]], [[3, 4]]]
        assert parsed.sparse("b") == [[[(3, 1.0)]], [[]]]


# ---------------------------------------------------------------------------------- values
class TestDense:
    def test_values(self, ctf):
        parsed = ctf.read("|a -1.5 2e3\n|a +0 -0\n", A2, precision="double")
        assert parsed.dense("a") == [[[-1.5, 2000.0]], [[0.0, 0.0]]]
        assert np.signbit(parsed.streams["a"][1][0]).tolist() == [False, True]

    def test_fewer_values_are_zero_padded_with_a_warning_not_an_error(self, ctf, caplog):
        streams = StreamDefs(a=StreamDef(field="a", shape=4))
        with caplog.at_level(logging.WARNING, logger="cntkio"):
            parsed = ctf.read("|a 1 2\n|a 1 2 3 4\n", streams)
        assert parsed.dense("a") == [[[1, 2, 0, 0]], [[1, 2, 3, 4]]]
        assert parsed.deserializer.errors.count == 0
        assert any("zero-padded" in r.getMessage() for r in caplog.records)

    def test_empty_dense_sample_is_all_zeros(self, ctf):
        parsed = ctf.read("|a |b 3:1\n", AB)
        assert parsed.dense("a") == [[[0, 0]]]
        assert parsed.sparse("b") == [[[(3, 1.0)]]]

    def test_array_layout(self, ctf):
        parsed = ctf.read("1 |a 1 2\n1 |a 3 4\n2 |a 5 6\n", A2)
        chunk = parsed.deserializer.get_chunk(0)["a"]
        assert chunk.values.shape == (3, 2)
        assert chunk.values.dtype == np.float32
        assert chunk.seq_offsets.tolist() == [0, 2, 3]


class TestSparse:
    def test_entries_and_csr_layout(self, ctf):
        parsed = ctf.read("1 |a 0 0 |b 0:1 4:-2.5\n1 |b\n1 |b 2:3\n2 |a 0 0 |b 1:1\n", AB)
        assert parsed.sparse("b") == [[[(0, 1.0), (4, -2.5)], [], [(2, 3.0)]], [[(1, 1.0)]]]
        chunk = parsed.deserializer.get_chunk(0)["b"]
        assert chunk.indices.dtype == np.int32
        assert chunk.indptr.tolist() == [0, 2, 2, 3, 4]
        assert chunk.seq_offsets.tolist() == [0, 3, 4]
        assert chunk.dim == 5
        assert chunk.csr().shape == (4, 5)

    def test_empty_sparse_samples_have_no_entries(self, ctf):
        parsed = ctf.read("|a 1 2 |b\n|b|a 3 4\n|a 5 6 |b \n", AB)
        assert parsed.sparse("b") == [[[]], [[]], [[]]]
        assert parsed.deserializer.get_chunk(0)["b"].indptr.tolist() == [0, 0, 0, 0]

    def test_last_valid_index(self, ctf):
        parsed = ctf.read("|a 0 0 |b 4:1 0:2\n", AB)
        assert parsed.sparse("b") == [[[(0, 2.0), (4, 1.0)]]]

    def test_indices_are_sorted_and_duplicates_summed(self, ctf):
        parsed = ctf.read("|a 0 0 |b 3:1 1:2 3:4 0:0.5 3:0.25\n", AB)
        assert parsed.sparse("b") == [[[(0, 0.5), (1, 2.0), (3, 5.25)]]]

    def test_compat_keeps_file_order_and_duplicates(self, ctf):
        parsed = ctf.read("|a 0 0 |b 3:1 1:2 3:4 0:0.5\n", AB, compat=True)
        assert parsed.sparse("b") == [[[(3, 1.0), (1, 2.0), (3, 4.0), (0, 0.5)]]]

    def test_large_dim(self, ctf):
        streams = StreamDefs(b=StreamDef(field="b", shape=2**31 - 1, is_sparse=True))
        parsed = ctf.read("|b 2147483646:1 7:2\n", streams)
        assert parsed.sparse("b") == [[[(7, 2.0), (2147483646, 1.0)]]]

    def test_dim_above_int32_is_a_config_error(self, ctf):
        with pytest.raises(ConfigError):
            ctf.deserializer("|b 1:1\n", StreamDefs(b=StreamDef(field="b", shape=2**31, is_sparse=True)))


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("float", np.float32), ("Float", np.float32), ("float32", np.float32), ("double", np.float64),
     ("DOUBLE", np.float64), ("float64", np.float64)],
)  # fmt: skip
def test_precision(ctf, precision, dtype):
    parsed = ctf.read("|a 0.1 2 |b 1:0.1\n", AB, precision=precision)
    assert parsed.streams["a"][0].dtype == dtype
    assert parsed.streams["b"][0].dtype == dtype
    assert parsed.streams["a"][0][0, 0] == dtype(0.1)
    assert parsed.streams["b"][0].data[0] == dtype(0.1)
    assert all(info.dtype == dtype for info in parsed.deserializer.stream_infos())


def test_unknown_precision_is_a_config_error(ctf):
    with pytest.raises(ConfigError):
        ctf.deserializer("|a 1 2\n", A2, precision="half")


# ---------------------------------------------------------------------------------- names and comments
class TestAliases:
    def test_field_is_the_alias_and_the_name_is_the_stream_name(self, ctf):
        streams = StreamDefs(features=StreamDef(field="F", shape=2), labels=StreamDef(shape=1))
        parsed = ctf.read("|F 1 2 |features 9 9 |labels 3\n", streams)
        assert parsed.dense("features") == [[[1, 2]]]
        assert parsed.dense("labels") == [[[3]]]
        assert [(i.name, i.alias) for i in parsed.deserializer.stream_infos()] == [
            ("features", "F"),
            ("labels", "labels"),
        ]

    def test_matching_is_exact_and_case_sensitive(self, ctf):
        parsed = ctf.read("|A 9 9 |ab 9 |a1 9 |a 1 2\n", A2)
        assert parsed.dense("a") == [[[1, 2]]]
        assert parsed.deserializer.errors.count == 0

    def test_utf8_aliases(self, ctf):
        streams = StreamDefs(g=StreamDef(field="größe", shape=1), j=StreamDef(field="日本", shape=1))
        parsed = ctf.read("|größe 1 |日本 2\n", streams)
        assert parsed.dense("g") == [[[1]]]
        assert parsed.dense("j") == [[[2]]]

    def test_bytes_above_0x7f_are_name_bytes_not_delimiters(self, ctf):
        # [fix] CNTK ends a name at a byte >= 0x80; here 'aé' is an unknown name, not 'a'
        parsed = ctf.read("|a\u00e9 9 9 |a 1 2\n", A2)
        assert parsed.dense("a") == [[[1, 2]]]

    def test_unknown_inputs_are_skipped_without_error(self, ctf, caplog):
        with caplog.at_level(logging.INFO, logger="cntkio"):
            parsed = ctf.read("1 |a 1 2 |zzz 1 2 3 x y |b 1:1\n1 |other 5\n", AB, trace_level=2)
        assert parsed.dense("a") == [[[1, 2]]]
        assert parsed.sparse("b") == [[[(1, 1.0)]]]
        assert parsed.lengths == [1]
        assert parsed.deserializer.errors.count == 0
        assert any("not in the configuration" in r.getMessage() for r in caplog.records)

    @pytest.mark.parametrize("alias", ["", "a b", "a|b", "#a", "a\tb"])
    def test_invalid_alias_is_a_config_error(self, ctf, alias):
        with pytest.raises(ConfigError):
            ctf.deserializer("|a 1\n", StreamDefs(a=StreamDef(field=alias, shape=1)))

    def test_duplicate_alias_is_a_config_error(self, ctf):
        streams = StreamDefs(a=StreamDef(field="x", shape=1), b=StreamDef(field="x", shape=1))
        with pytest.raises(ConfigError):
            ctf.deserializer("|x 1\n", streams)


class TestComments:
    def test_comment_runs_to_the_next_bar(self, ctf):
        parsed = ctf.read("|# a comment 1 2 3 |a 1 2 |#x|b 1:1\n", AB)
        assert parsed.dense("a") == [[[1, 2]]]
        assert parsed.sparse("b") == [[[(1, 1.0)]]]

    def test_escaped_bar_in_a_comment_is_two_comments(self, ctf):
        parsed = ctf.read("|# a '|#' b |a 1 2 |b\n", AB)
        assert parsed.dense("a") == [[[1, 2]]]
        assert parsed.deserializer.errors.count == 0

    def test_text_after_a_bar_in_a_comment_is_an_input_name(self, ctf):
        # '|# a |b2 |a 1 2': the comment ends at '|', 'b2' is an unknown input, then a
        parsed = ctf.read("|# a |b2 9 |a 1 2 |b\n", AB)
        assert parsed.dense("a") == [[[1, 2]]]
        assert parsed.deserializer.errors.count == 0

    def test_trailing_comment(self, ctf):
        parsed = ctf.read("|a 1 2 |# 3 4\n", A2)
        assert parsed.dense("a") == [[[1, 2]]]

    def test_comment_between_lines_of_a_sequence(self, ctf):
        parsed = ctf.read("5 |a 1 2\n5 |# comment\n5 |a 3 4\n", A2)
        assert parsed.keys == [5]
        assert parsed.lengths == [2]
        assert parsed.dense("a") == [[[1, 2], [3, 4]]]


# ---------------------------------------------------------------------------------- chunking
def reference_chunks(sequence_starts: list[int], file_size: int, limit: int) -> list[list[int]]:
    """Spec §9: greedy chunks; a sequence's size runs to the start of the next sequence (or EOF)."""
    ends = [*sequence_starts[1:], file_size]
    chunks: list[list[int]] = []
    chunk_start = 0
    for i, (start, end) in enumerate(zip(sequence_starts, ends)):
        if not chunks or (ends[i - 1] - chunk_start) + (end - start) > limit:
            chunks.append([])
            chunk_start = start
        chunks[-1].append(i)
    return chunks


def chunk_test_file() -> tuple[str, list[int], list[int]]:
    """An id-mode file of sequences of 1..4 lines: (text, keys, byte offset of each sequence)."""
    lines, keys, starts, offset = [], [], [], 0
    for key in range(12):
        keys.append(key)
        starts.append(offset)
        for step in range(key % 4 + 1):
            line = f"{key} |a {key} {step} |b {step}:{key}\n"
            lines.append(line)
            offset += len(line)
    return "".join(lines), keys, starts


class TestChunking:
    @pytest.mark.parametrize("limit", [1, 20, 40, 64, 100, 150, 333, 10**9])
    def test_chunk_boundaries_follow_the_spec(self, ctf, limit):
        text, keys, starts = chunk_test_file()
        parsed = ctf.read(text, AB, chunk_size_in_bytes=limit)
        expected = [[keys[i] for i in chunk] for chunk in reference_chunks(starts, len(text), limit)]
        assert parsed.chunk_keys == expected

    @pytest.mark.parametrize("limit", [1, 17, 50, 128, 1000])
    def test_same_data_whatever_the_chunk_size(self, ctf, limit):
        text, keys, _ = chunk_test_file()
        whole = ctf.read(text, AB)
        chunked = ctf.read(text, AB, chunk_size_in_bytes=limit)
        assert whole.deserializer.num_chunks() == 1
        assert chunked.keys == whole.keys == keys
        assert chunked.lengths == whole.lengths == [k % 4 + 1 for k in keys]
        assert chunked.dense("a") == whole.dense("a")
        assert chunked.sparse("b") == whole.sparse("b")
        assert chunked.dense("a")[5] == [[5, 0], [5, 1]]

    def test_a_sequence_never_spans_chunks(self, ctf):
        text, keys, _ = chunk_test_file()
        parsed = ctf.read(text, AB, chunk_size_in_bytes=1)
        assert parsed.chunk_keys == [[k] for k in keys]
        for chunk_id, key in enumerate(keys):
            assert parsed.deserializer.get_chunk(chunk_id)["a"].values.shape == (key % 4 + 1, 2)

    def test_chunk_size_must_be_positive(self, ctf):
        with pytest.raises(ConfigError):
            ctf.deserializer("|a 1 2\n", A2, chunk_size_in_bytes=0)

    def test_dropped_lines_count_towards_the_chunk_size(self, ctf):
        # spec §9: a sequence's size runs to the start of the next one; dropped lines still count
        text = "|a 1 2 |b\n|b 1:1\n|a 3 4 |b\n"  # the middle line is dropped (a defines the size)
        parsed = ctf.read(text, chunk_size_in_bytes=20, **defining())
        assert parsed.keys == [0, 2]
        assert parsed.chunk_keys == [[0], [2]]  # 17 + 10 bytes > 20


# ---------------------------------------------------------------------------------- spec §13
class TestSpecExamples:
    TEXT = "7 |a 1 2 3 |b 0:1\n7 |a 4 5 6\n|b 4:2.5\n8|a 1e1 .5 0|b\n"

    def test_first_example_stops_at_the_bad_number_by_default(self, ctf):
        deserializer = ctf.deserializer(self.TEXT, SPEC13)
        assert deserializer.sequence_lengths().tolist() == [2, 1]
        with pytest.raises(MaxErrorsExceeded) as info:
            deserializer.get_chunk(0)
        assert (info.value.line, info.value.column, info.value.input, info.value.sequence_key) == (4, 9, "a", 8)

    def test_first_example_with_max_errors(self, ctf):
        # fixed: sequence 7 has length max(a, b) = 2 and no error; row 4 costs one error (the bad
        # 'a' sample; the row still has the empty 'b' sample) and sequence 8 keeps b, loses a
        parsed = ctf.read(self.TEXT, SPEC13, max_errors=1)
        assert parsed.keys == [7, 8]
        assert parsed.lengths == [2, 1]
        assert parsed.dense("a") == [[[1, 2, 3], [4, 5, 6]], []]
        assert parsed.sparse("b") == [[[(0, 1.0)], [(4, 2.5)]], [[]]]
        assert parsed.deserializer.errors.count == 1
        error = parsed.deserializer.errors.errors[0]
        assert (error.line, error.column, error.offset) == (4, 9, self.TEXT.index(" .5") + 1)

    def test_second_example(self, ctf):
        parsed = ctf.read("|x 1 2\n5 |x 3 4\n", StreamDefs(x=StreamDef(field="x", shape=2)))
        assert parsed.keys == [0, 1]
        assert parsed.dense("x") == [[[1, 2]], [[3, 4]]]
