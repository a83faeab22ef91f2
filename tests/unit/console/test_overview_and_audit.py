"""The overview's history of the last hour, and the audit page's filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from console.core.audit import AuditFilter, BadFilter, event_row
from console.core.overview import BUCKET, CallBucket, OverviewHistory, QueueReading, QueueSample
from contracts import (
    CacheInvalidate,
    DeadLettersPurged,
    MemoryStatus,
    MemoryUpdated,
    ResultData,
    ToolCallCompleted,
)
from operators.revision_store import ChangeTexts

NOW = datetime(2026, 12, 4, 12, 30, 20, tzinfo=UTC)
MINUTE = NOW.replace(second=0)


def _bucket(start: datetime, updated: int, p50: float | None = None) -> CallBucket:
    return CallBucket(
        start,
        {"memory_updated_successfully": updated},
        {"update_long_term_memory": updated},
        p50_s=p50,
        p99_s=p50,
    )


def test_the_first_refresh_reads_the_hour_then_only_the_last_two_minutes() -> None:
    history = OverviewHistory()

    since = history.reread_from(NOW)
    assert since == MINUTE - timedelta(minutes=59)
    history.merge(since, NOW, [], {})
    assert history.reread_from(NOW + timedelta(seconds=5)) == MINUTE - BUCKET


def test_a_refresh_replaces_its_minutes_and_keeps_the_older_ones() -> None:
    history = OverviewHistory()
    history.merge(
        history.reread_from(NOW),
        NOW,
        [_bucket(MINUTE - 2 * BUCKET, 5), _bucket(MINUTE - BUCKET, 1), _bucket(MINUTE, 1)],
        {MINUTE: 3},
    )
    later = NOW + timedelta(seconds=5)

    history.merge(history.reread_from(later), later, [_bucket(MINUTE, 4)], {MINUTE: 0})

    series = history.series(later)
    updated = series["by_status"]["memory_updated_successfully"]
    assert updated[-3:] == [5 / 60, 0, 4 / 60]
    assert series["minutes"][-1] == MINUTE.timestamp()
    assert len(series["minutes"]) == 60
    assert series["outbox_backlog"][-1] == 0


def test_minutes_older_than_the_window_are_forgotten() -> None:
    history = OverviewHistory()
    history.merge(history.reread_from(NOW), NOW, [_bucket(MINUTE - 59 * BUCKET, 2)], {})
    assert history.calls

    later = NOW + timedelta(minutes=1)
    history.merge(history.reread_from(later), later, [], {})

    assert not history.calls


def test_series_give_latency_in_milliseconds_and_none_where_nothing_was_measured() -> None:
    history = OverviewHistory()
    history.merge(history.reread_from(NOW), NOW, [_bucket(MINUTE, 1, p50=0.0123)], {})

    series = history.series(NOW)

    assert series["p50_ms"][-1] == 12.3
    assert series["p50_ms"][0] is None


def test_queue_samples_keep_an_hour_and_a_missing_queue_shows_as_none() -> None:
    history = OverviewHistory()
    old = QueueSample(NOW - timedelta(hours=1), {"dead": QueueReading(9, 0)})
    history.add_sample(old)
    history.add_sample(QueueSample(NOW - timedelta(minutes=1), {"dead": QueueReading(2, 0)}))
    history.add_sample(QueueSample(NOW, {"work": QueueReading(1, 1)}))

    series = history.series(NOW)

    assert len(series["samples"]) == 2
    assert series["queue_messages"] == {"dead": [2, None], "work": [None, 1]}


def _updated(memory_id: int, *, guild: str = "111", actor: str = "42") -> MemoryUpdated:
    return MemoryUpdated(
        tool_call_id="call-1",
        revision_id=3,
        scope="target_user",
        memory_id=memory_id,
        guild_id=guild,
        channel_id="444",
        owner_id="77",
        actor_id=actor,
        persona_id=1,
        persona_lineage_id=2,
    )


def test_an_empty_filter_matches_everything_even_what_is_no_event() -> None:
    empty = AuditFilter.parse({"server": " ", "user": ""})

    assert empty.is_empty
    assert empty.matches(_updated(5))
    assert empty.matches(None)


def test_each_field_narrows_and_all_must_match() -> None:
    event = _updated(5)
    completed = ToolCallCompleted(
        tool_call_id="call-1",
        tool_name="update_long_term_memory",
        guild_id="111",
        channel_id="444",
        shard_id=0,
        success=True,
        status=MemoryStatus.UPDATED,
        message="done",
        data=ResultData(memory_id=5),
    )

    assert AuditFilter(server="111", user="77", memory=5).matches(event)
    assert AuditFilter(user="42").matches(event)
    assert not AuditFilter(server="222").matches(event)
    assert not AuditFilter(memory=6).matches(event)
    assert AuditFilter(memory=5, action="tool_call.completed").matches(completed)
    assert not AuditFilter(action="memory.updated").matches(completed)
    assert not AuditFilter(server="111").matches(None)
    assert AuditFilter(server="111").matches(CacheInvalidate(cache="persona_state", key="111"))
    assert not AuditFilter(server="111").matches(CacheInvalidate(cache="user", key="111"))
    operator = DeadLettersPurged(actor="console:ann", queue="q", removed=1)
    assert AuditFilter(user="console:ann").matches(operator)


@pytest.mark.parametrize("query", [{"memory": "12a"}, {"action": "memory.exploded"}])
def test_a_filter_that_cannot_match_is_refused(query: dict[str, str]) -> None:
    with pytest.raises(BadFilter):
        AuditFilter.parse(query)


def test_the_filter_round_trips_through_the_query_string() -> None:
    audit_filter = AuditFilter(server="111", memory=5)

    assert AuditFilter.parse(audit_filter.as_query()) == audit_filter


def test_an_event_row_names_the_memory_revision_and_call() -> None:
    row = event_row(_updated(5), offset=17)

    assert row["offset"] == 17
    assert (row["type"], row["memory"], row["revision"], row["tool_call"]) == (
        "memory.updated",
        5,
        3,
        "call-1",
    )
    assert "actor=42" in row["details"]


def test_an_event_row_shows_its_revisions_texts_or_erased() -> None:
    shown = event_row(_updated(5), 1, ChangeTexts("a", "b", erased=False))
    erased = event_row(_updated(5), 2, ChangeTexts(None, None, erased=True))
    missing = event_row(_updated(5), 3, None)

    assert "before: a after: b" in shown["details"]
    assert "before: [erased] after: [erased]" in erased["details"]
    assert "(revision 3 not found)" in missing["details"]
