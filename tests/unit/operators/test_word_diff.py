"""Word diffs of a memory's text: pieces for the console, marks for a terminal."""

from __future__ import annotations

from operators.word_diff import Piece, marked_diff, word_diff


def test_a_changed_word_is_one_removal_and_one_addition() -> None:
    assert word_diff("Movie night is on Fridays.", "Movie night is on Saturdays.") == [
        Piece("same", "Movie night is on "),
        Piece("removed", "Fridays"),
        Piece("added", "Saturdays"),
        Piece("same", "."),
    ]


def test_a_deletion_and_a_creation_are_all_removed_or_all_added() -> None:
    assert word_diff("gone for good", None) == [Piece("removed", "gone for good")]
    assert word_diff("", "brand new") == [Piece("added", "brand new")]
    assert word_diff("same", "same") == [Piece("same", "same")]


def test_marks_show_removals_and_additions_in_one_line() -> None:
    pieces = word_diff("Movie night is on Fridays.", "Movie night is on Saturdays.")

    assert marked_diff(pieces) == "Movie night is on [-Fridays-]{+Saturdays+}."
    assert marked_diff(word_diff("", "new")) == "{+new+}"
    assert marked_diff(word_diff("old", None)) == "[-old-]"
    assert marked_diff([]) == ""
