"""How the operator commands show things: text on one line, aligned tables, times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from operators.display import (
    ExitCode,
    shown_content,
    shown_text,
    shown_time,
    table_lines,
    text_width,
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text", "plain text"),
        ('it\'s "quoted"', 'it\'s "quoted"'),  # as it is: no repr quotes added or escaped
        ("line one\nline two", "line one\\nline two"),
        ("tab\there\r", "tab\\there\\r"),
        ("bell\x07", "bell\\x07"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("\u202eevil", "\\u202eevil"),  # a right-to-left override would reorder the line
        ("👩\u200d💻 codes", "👩\u200d💻 codes"),  # the joiner of one emoji stays
        (None, "-"),
    ],
)
def test_shown_text_is_one_line_with_every_invisible_character_escaped(
    text: str | None, shown: str
) -> None:
    assert shown_text(text) == shown


def test_shown_text_cuts_to_a_width_in_columns() -> None:
    assert shown_text("abcdefghij", 6) == "abcde…"
    assert shown_text("abcdef", 6) == "abcdef"
    # Wide characters take two columns each: five of them fill ten.
    assert shown_text("映画の夜は土曜日", 10) == "映画の夜…"
    assert text_width(shown_text("映画の夜は土曜日", 10)) <= 10
    assert shown_text("a\nb", 3) == "a\\…"


def test_shown_content_says_deleted_and_none() -> None:
    assert shown_content(None) == "(deleted)"
    assert shown_content("") == "(none)"
    assert shown_content("x" * 100).endswith("…")
    assert shown_content("x" * 100, width=None) == "x" * 100


def test_shown_time_is_utc_with_a_z() -> None:
    moment = datetime(2026, 1, 31, 14, 0, 5, 123456, tzinfo=timezone(timedelta(hours=2)))

    assert shown_time(moment) == "2026-01-31T12:00:05Z"
    assert shown_time(moment, "milliseconds") == "2026-01-31T12:00:05.123Z"
    assert shown_time(datetime(2026, 1, 31, 12)) == "2026-01-31T12:00:00Z"  # naive is UTC
    assert shown_time(None) == "-"
    assert shown_time(datetime(2026, 1, 31, tzinfo=UTC)) == "2026-01-31T00:00:00Z"


def test_a_table_aligns_its_columns_and_leaves_the_last_unpadded() -> None:
    lines = table_lines(
        ("REVISION", "ACTOR", "AFTER"),
        [("7", "アリス", "short"), ("12", "bob", "a longer text")],
    )

    assert lines == [
        "REVISION  ACTOR   AFTER",
        "7         アリス  short",
        "12        bob     a longer text",
    ]
    # In a terminal the wide characters take two columns: AFTER's column lines up there too.
    assert text_width(lines[1][: lines[1].index("short")]) == lines[0].index("AFTER")


def test_exit_codes_are_the_documented_ones() -> None:
    assert [int(code) for code in ExitCode] == [0, 1, 2, 3, 141]
