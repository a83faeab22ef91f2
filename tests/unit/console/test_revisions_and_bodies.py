"""Revisions as a history page shows them, and a dead letter's body as JSON, text or bytes."""

from __future__ import annotations

from datetime import UTC, datetime

from console.core.bodies import SHOWN_BYTES, shown_body
from console.core.revisions import revision_views
from operators.revision_store import Revision
from operators.word_diff import Piece


def _revision(revision_id: int, before: str, after: str | None, tool_call_id: str) -> Revision:
    return Revision(
        revision_id=revision_id,
        scope="server_wide",
        memory_id=7,
        action="updated" if after is not None else "deleted",
        content_before=before,
        content_after=after,
        server_id=1,
        owner_user_id=None,
        persona_lineage_id=3,
        actor_disc_id="console:ann" if tool_call_id.startswith("restore:") else "42",
        tool_call_id=tool_call_id,
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_revision_views_are_newest_first_with_the_channel_of_their_call() -> None:
    first = _revision(1, "a", "b", "call-1")
    second = _revision(2, "b", "a", "restore:1:x")

    views = revision_views([first, second], {"call-1": "555"})

    assert [view.revision.revision_id for view in views] == [2, 1]
    assert [view.channel_id for view in views] == [None, "555"]
    assert [view.by_console for view in views] == [True, False]
    assert views[1].pieces == [Piece("removed", "a"), Piece("added", "b")]


def test_a_json_body_is_indented() -> None:
    shown = shown_body(b'{"tool_call_id":"c-1","arguments":{"memory_id":3}}')

    assert shown.kind == "json"
    assert shown.text.splitlines()[:2] == ["{", '  "tool_call_id": "c-1",']
    assert not shown.cut


def test_text_that_is_not_json_is_shown_as_text_and_other_bytes_as_a_hex_dump() -> None:
    assert shown_body(b"not json {").kind == "text"
    shown = shown_body(b"\xff\x00abc")

    assert shown.kind == "bytes"
    assert shown.text == "00000000  ff 00 61 62 63" + " " * 33 + "  ..abc"


def test_a_huge_body_is_cut_and_not_parsed() -> None:
    body = b'{"a": "' + b"x" * SHOWN_BYTES + b'"}'

    shown = shown_body(body)

    assert shown.cut
    assert shown.kind == "text"
    assert shown.size == len(body)
    assert len(shown.text) == SHOWN_BYTES
