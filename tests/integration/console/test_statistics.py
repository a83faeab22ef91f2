"""The overview's numbers from the database: calls per minute by status and tool, their
latency, and the outbox backlog at the end of each minute. Each test's rows are in minutes of
its own, far from now (the inbox and the outbox are shared by the whole test run)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from console.adapters.statistics import CallStatistics
from harness.world import World
from infra.settings import Settings
from infra.storage.engine import create_engine


@pytest.fixture
async def statistics(settings: Settings) -> AsyncIterator[CallStatistics]:
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    yield CallStatistics(engine)
    await engine.dispose()


def _far_minute() -> datetime:
    """A minute of this test alone, years from now: nothing else was answered then."""
    offset = uuid.uuid4().int % 500_000
    return datetime(2100, 1, 1, tzinfo=UTC) + timedelta(minutes=offset)


async def _answered(
    world: World, completed_at: datetime, *, status: str, tool: str, waited_ms: float | None
) -> None:
    requested_at = None if waited_ms is None else completed_at - timedelta(milliseconds=waited_ms)
    await world.execute(
        "INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, channel_id, shard_id,"
        " status, result, completed_at, requested_at)"
        " VALUES (%s, %s, %s, '1', 0, %s, '{}', %s, %s)",
        f"stat-{uuid.uuid4()}",
        uuid.uuid4(),
        tool,
        status,
        completed_at,
        requested_at,
    )


async def test_calls_per_minute_by_status_and_tool_with_their_latency(
    statistics: CallStatistics, world: World
) -> None:
    minute = _far_minute()
    for waited in (10, 20, 30, 40, None):
        await _answered(
            world,
            minute + timedelta(seconds=5),
            status="memory_updated_successfully",
            tool="update_long_term_memory",
            waited_ms=waited,
        )
    await _answered(
        world,
        minute + timedelta(seconds=59),
        status="memory_save_failed_duplicate",
        tool="create_long_term_memory",
        waited_ms=1000,
    )
    await _answered(
        world,
        minute + timedelta(minutes=1, seconds=1),
        status="memory_updated_successfully",
        tool="update_long_term_memory",
        waited_ms=5,
    )

    # After the refresh's moment: the next refresh's.
    await _answered(
        world,
        minute + timedelta(minutes=2, seconds=1),
        status="memory_updated_successfully",
        tool="update_long_term_memory",
        waited_ms=5,
    )

    first, second = await statistics.minutes(minute, minute + timedelta(minutes=2))

    assert first.start == minute
    assert first.by_status == {"memory_updated_successfully": 5, "memory_save_failed_duplicate": 1}
    assert first.by_tool == {"update_long_term_memory": 5, "create_long_term_memory": 1}
    # The median of 10, 20, 30, 40 and 1000 ms; the call with no request time is left out.
    assert first.p50_s == pytest.approx(0.030)
    assert first.p99_s is not None and 0.9 < first.p99_s < 1.0
    assert second.start == minute + timedelta(minutes=1)
    assert second.p50_s == pytest.approx(0.005)


async def test_the_outbox_backlog_at_the_end_of_each_minute(
    statistics: CallStatistics, world: World
) -> None:
    minute = _far_minute()

    async def row(created: timedelta, published: timedelta | None) -> None:
        await world.execute(
            "INSERT INTO outbox (event_id, event_type, routing_key, body, created_at,"
            " published_at) VALUES (%s, 'cache.invalidate', 'cache.user.1', '\\x7b7d', %s, %s)",
            uuid.uuid4(),
            minute + created,
            None if published is None else minute + published,
        )

    await row(timedelta(seconds=10), timedelta(seconds=20))  # published within the minute
    await row(timedelta(seconds=50), timedelta(minutes=1, seconds=30))  # across its end
    now = minute + timedelta(minutes=2, seconds=15)
    before = minute - timedelta(minutes=1)

    backlog = await statistics.backlog(before, now)

    # Rows other tests left unpublished count at every minute alike: the minute before this
    # test's rows is the baseline.
    baseline = backlog[before]
    assert backlog[minute] - baseline == 1
    assert backlog[minute + timedelta(minutes=1)] - baseline == 0
    assert backlog[minute + timedelta(minutes=2)] - baseline == 0
    assert len(backlog) == 4
