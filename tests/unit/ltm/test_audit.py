"""The pure side of `ltm audit tail`: where `--from` starts, and each event's line."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts import CacheInvalidate, DeadLettersPurged, DeadLettersReplayed, ReplayedCall
from ltm.commands.audit import event_line
from operators.audit_stream import parse_start
from operators.revision_store import ChangeTexts
from tests.integration.operators.seeding import memory_updated


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("first", "first"),
        ("LAST", "last"),
        ("2025-01-31T12:00:00Z", datetime(2025, 1, 31, 12, tzinfo=UTC)),
        ("2025-01-31T14:00:00+02:00", datetime(2025, 1, 31, 12, tzinfo=UTC)),
        ("2025-01-31 12:00", datetime(2025, 1, 31, 12, tzinfo=UTC)),
        ("2025-01-31 12:00:30", datetime(2025, 1, 31, 12, 0, 30, tzinfo=UTC)),
        ("2025-01-31", datetime(2025, 1, 31, tzinfo=UTC)),
    ],
)
def test_parse_start(text: str, expected: object) -> None:
    assert parse_start(text) == expected


def test_event_line_of_a_delete_says_deleted() -> None:
    event = memory_updated("tc-x", 9)

    line = event_line(event, ChangeTexts("line one\nline two", None, erased=False))

    assert "before: line one\\nline two after: (deleted)" in line
    assert "\n" not in line


def test_event_line_shows_text_as_text_and_absent_values_as_a_dash() -> None:
    event = memory_updated("tc-x", 9)
    cache = CacheInvalidate(cache="user", key="42")

    assert 'before: it\'s after: say "hi"' in event_line(
        event, ChangeTexts("it's", 'say "hi"', erased=False)
    )
    assert "None" not in event_line(cache)
    assert event_line(cache).split()[2:] == ["-", "-", "-", "cache=user", "key=42"]


def test_event_line_of_a_redacted_revision_says_erased_and_of_a_missing_one_not_found() -> None:
    event = memory_updated("tc-x", 9, revision_id=77)

    assert "before: [erased] after: [erased]" in event_line(
        event, ChangeTexts(None, None, erased=True)
    )
    assert "(revision 77 not found)" in event_line(event, None)


def test_event_line_of_an_operator_action_names_the_operator_and_what_was_done() -> None:
    replayed = DeadLettersReplayed(
        actor="console:ann",
        queue="ltm.tool_calls.dead",
        replayed=(ReplayedCall(event_id="e-1", tool_call_id="tc-1", routing_key="r"),),
        failed=1,
    )
    purged = DeadLettersPurged(actor="console:bob", queue="ltm.tool_calls.dead", removed=3)

    assert event_line(replayed).split()[1:] == [
        "operator.dead_letters_replayed",
        "-",
        "-",
        "-",
        "actor=console:ann",
        "replayed=1",
        "failed=1",
    ]
    assert event_line(purged).split()[-2:] == ["actor=console:bob", "removed=3"]
