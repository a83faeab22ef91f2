"""The overview's numbers from the database, a row a minute: calls answered by status and
tool, their latency (the request's time to the answer's, `tool_call_inbox`), and the outbox
backlog at the end of each minute (`outbox`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from console.core.overview import CallBucket
from worker.adapters.outbox import OutboxStore

__all__ = ["CallStatistics", "RecentLatency"]

# Seconds a user waited: from the bot's request to the answer, never below 0 (the bot's and
# the database's clocks may differ a little). Records older than migration 0006 have no
# request time and are left out.
_LATENCY: Final = "greatest(0, extract(epoch FROM completed_at - requested_at))"

_CALLS: Final = text(
    """
    SELECT date_trunc('minute', completed_at) AS minute, status, tool_name, count(*) AS calls
    FROM tool_call_inbox
    WHERE completed_at >= :since AND completed_at < :until
    GROUP BY 1, 2, 3
    """
)

_LATENCIES: Final = text(
    f"""
    SELECT date_trunc('minute', completed_at) AS minute,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY {_LATENCY}) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY {_LATENCY}) AS p99
    FROM tool_call_inbox
    WHERE completed_at >= :since AND completed_at < :until AND requested_at IS NOT NULL
    GROUP BY 1
    """
)

# The last minute's calls, and the latency of the last five minutes.
_RECENT: Final = text(
    f"""
    SELECT count(*) FILTER (WHERE completed_at > :now - interval '1 minute') AS last_minute,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY {_LATENCY})
               FILTER (WHERE requested_at IS NOT NULL) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY {_LATENCY})
               FILTER (WHERE requested_at IS NOT NULL) AS p99
    FROM tool_call_inbox
    WHERE completed_at > :now - interval '5 minutes'
    """
)

# Rows not yet published at a moment: still unpublished, or published after it. Published rows
# are kept LTM_OUTBOX_RETENTION_S (an hour by default), so the hour back is whole. Each count
# walks one partial index (unpublished rows; publication times).
_BACKLOG_AT: Final = text(
    """
    SELECT m.minute,
           (SELECT count(*) FROM outbox
             WHERE published_at IS NULL AND created_at <= m.at)
         + (SELECT count(*) FROM outbox
             WHERE published_at > m.at AND created_at <= m.at) AS backlog
    FROM (
        SELECT minute, least(minute + interval '1 minute', CAST(:now AS timestamptz)) AS at
        FROM generate_series(
            CAST(:since AS timestamptz), CAST(:now AS timestamptz), interval '1 minute'
        ) AS minute
    ) AS m
    """
)


@dataclass(frozen=True, slots=True)
class RecentLatency:
    """The tiles' figures of the last minutes."""

    calls_last_minute: int
    p50_s: float | None  # over the last five minutes
    p99_s: float | None


class CallStatistics:
    """Reads only: what the operator role may (SELECT on the inbox and the outbox)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def minutes(self, since: datetime, until: datetime) -> list[CallBucket]:
        """Every minute from `since` (a minute's start) to `until` with answered calls."""
        window = {"since": since, "until": until}
        counts: dict[datetime, tuple[dict[str, int], dict[str, int]]] = {}
        latencies: dict[datetime, tuple[float | None, float | None]] = {}
        async with self.engine.connect() as connection:
            for row in await connection.execute(_CALLS, window):
                by_status, by_tool = counts.setdefault(row.minute, ({}, {}))
                by_status[row.status] = by_status.get(row.status, 0) + row.calls
                by_tool[row.tool_name] = by_tool.get(row.tool_name, 0) + row.calls
            for row in await connection.execute(_LATENCIES, window):
                latencies[row.minute] = (_seconds(row.p50), _seconds(row.p99))
        return [
            CallBucket(minute, by_status, by_tool, *latencies.get(minute, (None, None)))
            for minute, (by_status, by_tool) in sorted(counts.items())
        ]

    async def backlog(self, since: datetime, now: datetime) -> dict[datetime, int]:
        """The outbox backlog at the end of each minute from `since` (at `now` for the one in
        progress), keyed by the minute's start."""
        async with self.engine.connect() as connection:
            rows = await connection.execute(_BACKLOG_AT, {"since": since, "now": now})
            return {row.minute: int(row.backlog) for row in rows if row.minute < now}

    async def recent(self, now: datetime) -> RecentLatency:
        async with self.engine.connect() as connection:
            row = (await connection.execute(_RECENT, {"now": now})).one()
        return RecentLatency(int(row.last_minute), _seconds(row.p50), _seconds(row.p99))

    async def outbox_backlog(self) -> int:
        return await OutboxStore(self.engine).backlog()


def _seconds(value: float | None) -> float | None:
    return None if value is None else float(value)
