"""The pure edit rules shared by Edit and MultiEdit."""

from __future__ import annotations

import tracemalloc

import pytest

from daemon.tools.files.edits import (
    SNIPPET_MAX_LINES,
    EditError,
    EditSpec,
    apply_edit,
    apply_edits,
    decode_text,
    numbered_snippet,
)


def test_single_occurrence_is_replaced() -> None:
    applied = apply_edit("alpha\nbeta\ngamma\n", EditSpec("beta", "BETA"))
    assert applied.text == "alpha\nBETA\ngamma\n"
    assert applied.replacements == 1
    assert applied.start == len("alpha\n")


def test_identical_strings_are_refused() -> None:
    with pytest.raises(EditError, match="identical"):
        apply_edit("x = 1\n", EditSpec("x", "x"))


def test_not_found_explains_exact_match_and_read_prefix() -> None:
    with pytest.raises(EditError) as caught:
        apply_edit("    indented\n", EditSpec("indented  ", "x"))
    message = str(caught.value)
    assert message.startswith("old_string was not found in the file.")
    assert "exactly" in message and "whitespace" in message and "indentation" in message
    assert "6-column number and a TAB" in message
    assert "seems to start its lines with such a prefix" not in message


def test_not_found_points_out_a_copied_line_number_prefix() -> None:
    with pytest.raises(EditError, match="seems to start its lines with such a prefix"):
        apply_edit("def f():\n    pass\n", EditSpec("     1\tdef f():\n     2\t    pass", "x"))


def test_several_occurrences_need_replace_all() -> None:
    with pytest.raises(EditError) as caught:
        apply_edit("a = 1\nb = 1\nc = 1\n", EditSpec("= 1", "= 2"))
    assert "found 3 times" in str(caught.value)
    assert "set replace_all to true" in str(caught.value)
    assert "surrounding lines" in str(caught.value)


def test_replace_all_replaces_every_occurrence() -> None:
    applied = apply_edit("a = 1\nb = 1\nc = 1\n", EditSpec("= 1", "= 2", replace_all=True))
    assert applied.text == "a = 2\nb = 2\nc = 2\n"
    assert applied.replacements == 3


def test_empty_old_string_fills_an_empty_or_blank_text() -> None:
    assert apply_edit("", EditSpec("", "new\n")).text == "new\n"
    assert apply_edit(" \n\n", EditSpec("", "new\n")).text == "new\n"


def test_empty_old_string_is_refused_when_there_is_content() -> None:
    with pytest.raises(EditError, match="use the Write tool"):
        apply_edit("content\n", EditSpec("", "new"))


def test_crlf_file_keeps_crlf_when_strings_use_lf() -> None:
    text = "one\r\ntwo\r\nthree\r\n"
    applied = apply_edit(text, EditSpec("one\ntwo\n", "uno\ndos\nextra\n"))
    assert applied.text == "uno\r\ndos\r\nextra\r\nthree\r\n"


def test_lf_file_matches_strings_sent_with_crlf() -> None:
    applied = apply_edit("a\nb\n", EditSpec("a\r\nb", "x\r\ny"))
    assert applied.text == "x\ny\n"


def test_mixed_endings_region_in_lf_still_matches_as_given() -> None:
    text = "crlf line\r\nlf one\nlf two\n"
    applied = apply_edit(text, EditSpec("lf one\nlf two", "changed\nlines"))
    assert applied.text == "crlf line\r\nchanged\nlines\n"


def test_edits_apply_in_order_each_on_the_previous_result() -> None:
    text, steps = apply_edits(
        "x = 1\n", [EditSpec("x = 1", "x = 2"), EditSpec("x = 2", "x = 3\ny = 4")]
    )
    assert text == "x = 3\ny = 4\n"
    assert [step.replacements for step in steps] == [1, 1]


def test_failing_edit_is_named_by_its_one_based_index() -> None:
    with pytest.raises(EditError) as caught:
        apply_edits(
            "a\nb\nc\n",
            [EditSpec("a", "A"), EditSpec("missing", "M"), EditSpec("c", "C")],
        )
    message = str(caught.value)
    assert message.startswith("Edit 2 of 3 failed: old_string was not found")
    assert "None of the edits were applied; the file is unchanged." in message


def test_snippet_is_numbered_like_read_with_context() -> None:
    text = "".join(f"line {n}\n" for n in range(1, 21))
    start = text.index("line 10")
    snippet = numbered_snippet(text, start, len("line 10"))
    lines = snippet.split("\n")
    assert lines[0] == "     6\tline 6"
    assert "    10\tline 10" in lines
    assert lines[-1] == "    14\tline 14"


def test_snippet_drops_carriage_returns_and_caps_its_length() -> None:
    text = "head\r\n" + "".join(f"n{n}\r\n" for n in range(200))
    snippet = numbered_snippet(text, len("head\r\n"), len(text) - len("head\r\n"))
    assert "\r" not in snippet
    assert snippet.split("\n")[0] == "     1\thead"
    assert len(snippet.split("\n")) == SNIPPET_MAX_LINES + 1
    assert snippet.endswith("more lines not shown)")


def test_snippet_of_an_empty_text_is_empty() -> None:
    assert numbered_snippet("", 0, 0) == ""


def test_binary_and_non_utf8_files_are_refused() -> None:
    with pytest.raises(EditError, match="binary"):
        decode_text(b"\x7fELF\x00\x01", "/ws/a.out")
    with pytest.raises(EditError, match="not valid UTF-8"):
        decode_text(b"caf\xe9\n", "/ws/latin1.txt")
    assert decode_text("café\n".encode(), "/ws/ok.txt") == "café\n"


def test_a_snippet_of_a_huge_text_looks_only_at_its_region() -> None:
    text = "a\n" * 5_000_000  # 5 million lines
    start = text.index("a", 2 * 2_500_000)
    tracemalloc.start()
    try:
        snippet = numbered_snippet(text, start, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert snippet.split("\n") == [f"{n:>6}\ta" for n in range(2_499_997, 2_500_006)]
    assert peak < 1 << 20, f"{peak} bytes held: the whole text was split into lines"


def test_a_snippet_of_a_long_region_is_capped_without_splitting_it_all() -> None:
    text = "before\n" + "new\n" * 1_000_000 + "after\n"
    tracemalloc.start()
    try:
        snippet = numbered_snippet(text, len("before\n"), 4 * 1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    lines = snippet.split("\n")
    assert lines[0] == "     1\tbefore"
    assert lines[1:SNIPPET_MAX_LINES] == [f"{n:>6}\tnew" for n in range(2, SNIPPET_MAX_LINES + 1)]
    assert lines[-1] == f"... ({1_000_002 - SNIPPET_MAX_LINES} more lines not shown)"
    assert peak < 1 << 20, f"{peak} bytes held: the whole region was split into lines"


def test_the_size_an_edit_would_give_is_checked_before_it_is_made() -> None:
    with pytest.raises(EditError) as caught:
        apply_edit("ab" * 10, EditSpec("a", "é" * 10, replace_all=True), max_bytes=200)
    assert str(caught.value).startswith(
        "Replacing all 10 occurrences would make the file 210 bytes, more than the 200 bytes"
    )
    assert (
        apply_edit("ab" * 10, EditSpec("a", "é" * 9 + "z", replace_all=True), max_bytes=200).size
        == 200
    )
    with pytest.raises(EditError, match="This edit would make the file 201 bytes"):
        apply_edit("x" * 200, EditSpec("x" * 200, "y" * 201), max_bytes=200)
