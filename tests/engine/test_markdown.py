"""engine.markdown.table: the one Markdown table renderer, with an optional alignment per column."""

from __future__ import annotations

import pytest

from engine.markdown import table


def test_default_is_left_aligned():
    assert table(["a", "b"], [[1, "x"], [2.5, "y"]]) == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 | y |"]


@pytest.mark.parametrize("align", ["lrc", ["l", "r", "c"], ("l", "r", "c")])
def test_alignment_letters_as_string_or_sequence(align):
    assert table(["a", "b", "c"], [], align=align) == ["| a | b | c |", "|---|---:|:---:|"]


def test_empty_cell_is_one_space():
    assert table(["", "run 1"], [["", "**4 / 1**"]], align="rl") == ["| | run 1 |", "|---:|---|", "| | **4 / 1** |"]


def test_rows_may_be_a_generator():
    assert table(["n"], ([i] for i in range(2)), align="r")[2:] == ["| 0 |", "| 1 |"]


@pytest.mark.parametrize("align, match", [("lr", "align has 2 letters for 3 columns"), (["l"] * 4, "4 letters for 3"),
                                          ("lrx", "got 'x'"), (["l", "right", "c"], "got 'right'")])
def test_bad_alignment_raises(align, match):
    with pytest.raises(ValueError, match=match):
        table(["a", "b", "c"], [], align=align)


def test_row_of_wrong_length_raises():
    with pytest.raises(ValueError, match="a table row has 1 cells for 2 columns"):
        table(["a", "b"], [["only"]])
