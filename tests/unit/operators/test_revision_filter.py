"""An operator's filter of revisions read from text: times in UTC, ids as digits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from contracts import RevisionFilter
from operators.revision_filter import BadRevisionFilter, parse_time, revision_filter


def test_times_are_rfc_3339_or_a_minute_in_utc() -> None:
    assert parse_time("2026-12-04 10:30") == datetime(2026, 12, 4, 10, 30, tzinfo=UTC)
    assert parse_time("2026-12-04T10:30:00Z") == datetime(2026, 12, 4, 10, 30, tzinfo=UTC)
    plus_two = parse_time("2026-12-04T12:30:00+02:00")
    assert plus_two == datetime(2026, 12, 4, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    with pytest.raises(BadRevisionFilter, match="not a time"):
        parse_time("yesterday")


def test_blank_fields_are_not_given_and_ids_must_be_digits() -> None:
    assert revision_filter({"actor": " ", "guild": ""}) == RevisionFilter()
    assert revision_filter(
        {"actor": "console:ann", "guild": "11", "channel": "22", "tool_call": "call-1"}
    ) == RevisionFilter(
        actor_disc_id="console:ann", guild_id="11", channel_id="22", tool_call_id="call-1"
    )
    assert revision_filter({"since": "2026-12-04 10:30"}).since == datetime(
        2026, 12, 4, 10, 30, tzinfo=UTC
    )
    with pytest.raises(BadRevisionFilter, match="guild: not a Discord id"):
        revision_filter({"guild": "abc"})
