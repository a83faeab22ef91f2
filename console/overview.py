"""The overview's data, refreshed in the background every `LTM_CONSOLE_REFRESH_S`: the
database's last hour (a little at a time), and the broker's queue counts now."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from console.adapters.broker import BrokerLink
from console.adapters.statistics import CallStatistics
from console.core.overview import OverviewHistory, QueueReading, QueueSample, is_success
from contracts import Topology
from infra.observability.logs import error_summary, get_logger

__all__ = ["Overview", "watched_queues"]

log = get_logger("ltm.console")


def watched_queues(topology: Topology, shard_count: int) -> list[str]:
    """The work queue, the dead letters, each shard's queue, and the audit stream."""
    return [
        topology.worker_queue,
        topology.dead_letter_queue,
        *(topology.shard_queue(shard) for shard in range(shard_count)),
        topology.audit_stream,
    ]


@dataclass
class Overview:
    statistics: CallStatistics
    broker: BrokerLink
    queues: list[str]
    refresh_s: float
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def __post_init__(self) -> None:
        self.history = OverviewHistory()
        self._snapshot: dict[str, Any] | None = None
        self._problems: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._refresh_forever(), name="overview refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def snapshot(self) -> dict[str, Any]:
        """The latest refresh, as the page's script takes it (refreshed now if none yet)."""
        if self._snapshot is None:
            await self.refresh()
        assert self._snapshot is not None
        return self._snapshot

    async def _refresh_forever(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.refresh_s)

    async def refresh(self) -> None:
        """Each source on its own: a database that does not answer leaves the broker's counts
        current, and the other way round; the page says which one failed."""
        now = self.clock()
        readings = await self._attempt("broker", self.broker.queue_readings(self.queues))
        if readings is not None:
            self.history.add_sample(QueueSample(now, readings))
        recent = await self._attempt("database", self._read_database(now))
        self._snapshot = self._build(now, readings, recent)

    async def _read_database(self, now: datetime) -> tuple[Any, int]:
        since = self.history.reread_from(now)
        # A call stamped a moment after `now` belongs to the next refresh.
        minutes = await self.statistics.minutes(since, now)
        backlog = await self.statistics.backlog(since, now)
        self.history.merge(since, now, minutes, backlog)
        return await self.statistics.recent(now), await self.statistics.outbox_backlog()

    async def _attempt(self, source: str, work: Any) -> Any:
        try:
            result = await work
        except Exception as error:  # any fault of that source: shown, retried next time
            if self._problems.get(source) != repr(error):
                log.warning(
                    "console.overview_source_silent", source=source, error=error_summary(error)
                )
            self._problems[source] = repr(error)
            return None
        self._problems.pop(source, None)
        return result

    def _build(
        self,
        now: datetime,
        readings: dict[str, QueueReading] | None,
        recent: tuple[Any, int] | None,
    ) -> dict[str, Any]:
        series = self.history.series(now)
        answered = failed = 0
        for bucket in self.history.calls.values():
            for status, calls in bucket.by_status.items():
                answered += calls
                failed += 0 if is_success(status) else calls
        tiles: dict[str, Any] = {
            "answered_last_hour": answered,
            "failed_last_hour": failed,
        }
        if recent is not None:
            latency, outbox = recent
            tiles |= {
                "calls_per_s": round(latency.calls_last_minute / 60, 2),
                "p50_ms": None if latency.p50_s is None else round(latency.p50_s * 1000, 1),
                "p99_ms": None if latency.p99_s is None else round(latency.p99_s * 1000, 1),
                "outbox_backlog": outbox,
            }
        topology = self.broker.topology
        if readings is not None:
            work = readings.get(topology.worker_queue)
            dead = readings.get(topology.dead_letter_queue)
            tiles |= {
                "waiting": None if work is None else work.messages,
                "workers": None if work is None else work.consumers,
                "dead_letters": None if dead is None else dead.messages,
            }
        return {
            "at": now.timestamp(),
            "tiles": tiles,
            "series": series,
            "queues": [
                {
                    "name": name,
                    "exists": readings is not None and name in readings,
                    "messages": _reading(readings, name, "messages"),
                    "consumers": _reading(readings, name, "consumers"),
                }
                for name in self.queues
            ],
            "problems": dict(self._problems),
        }


def _reading(readings: dict[str, QueueReading] | None, name: str, field: str) -> int | None:
    if readings is None or name not in readings:
        return None
    value: int = getattr(readings[name], field)
    return value
