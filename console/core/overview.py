"""The overview's numbers over the last hour, shaped for the charts.

Calls per minute by status and by tool, their latency and the outbox backlog come from the
database (the inbox and the outbox), so a restarted console shows the hour again. Queue
depths and consumers come from the broker, which keeps no history: those series start when
the console does. The history is refreshed a little at a time: each refresh reads again only
the last two minutes, whose rows may still be committing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from contracts import MemoryStatus

__all__ = [
    "BUCKET",
    "WINDOW",
    "CallBucket",
    "Current",
    "OverviewHistory",
    "QueueReading",
    "QueueSample",
    "is_success",
]

WINDOW: Final = timedelta(hours=1)
BUCKET: Final = timedelta(minutes=1)
# Buckets read again on each refresh: the one in progress, and the one before it (a call
# stamped in its last instant may commit after the previous refresh read it).
_REREAD: Final = 2


def is_success(status: str) -> bool:
    try:
        return MemoryStatus(status).success
    except ValueError:  # a status of a newer worker: not one this console counts as success
        return False


@dataclass(frozen=True, slots=True)
class CallBucket:
    """One minute of answered calls (by their `completed_at`)."""

    start: datetime
    by_status: Mapping[str, int]
    by_tool: Mapping[str, int]
    # Seconds from the request to the answer; None when no call of the minute has both times.
    p50_s: float | None = None
    p99_s: float | None = None


@dataclass(frozen=True, slots=True)
class QueueReading:
    messages: int
    consumers: int


@dataclass(frozen=True, slots=True)
class QueueSample:
    """The broker's counts at one moment; a queue missing from `queues` does not exist."""

    at: datetime
    queues: Mapping[str, QueueReading]


@dataclass(frozen=True, slots=True)
class Current:
    """The tiles: what holds now, or over the last few minutes."""

    calls_per_s: float  # over the last minute
    answered_last_hour: int
    failed_last_hour: int
    p50_s: float | None  # over the last five minutes
    p99_s: float | None
    outbox_backlog: int


def bucket_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@dataclass
class OverviewHistory:
    """The last hour, merged from refreshes."""

    calls: dict[datetime, CallBucket] = field(default_factory=dict)
    backlog: dict[datetime, int] = field(default_factory=dict)
    samples: deque[QueueSample] = field(default_factory=deque)
    _read_until: datetime | None = None

    def reread_from(self, now: datetime) -> datetime:
        """Where the next refresh reads from: the whole window the first time, then the last
        two minutes."""
        start = bucket_of(now - WINDOW) + BUCKET
        if self._read_until is None:
            return start
        return max(start, bucket_of(self._read_until) - BUCKET * (_REREAD - 1))

    def merge(
        self,
        since: datetime,
        now: datetime,
        calls: Iterable[CallBucket],
        backlog: Mapping[datetime, int],
    ) -> None:
        """What a refresh read from `since` replaces what the history held from there."""
        for start in [start for start in self.calls if start >= since]:
            del self.calls[start]
        self.calls.update({bucket.start: bucket for bucket in calls if bucket.start >= since})
        self.backlog.update(backlog)
        self._read_until = now
        self._forget_before(bucket_of(now - WINDOW) + BUCKET)

    def add_sample(self, sample: QueueSample) -> None:
        self.samples.append(sample)
        while self.samples and self.samples[0].at <= sample.at - WINDOW:
            self.samples.popleft()

    def _forget_before(self, start: datetime) -> None:
        for kept in (self.calls, self.backlog):
            for old in [moment for moment in kept if moment < start]:
                del kept[old]

    def series(self, now: datetime) -> dict[str, Any]:
        """Aligned arrays for the charts: one point a minute (epoch seconds), a missing value
        as None; queue samples on their own time axis."""
        first = bucket_of(now - WINDOW) + BUCKET
        minutes = [first + BUCKET * step for step in range(int(WINDOW / BUCKET))]
        per_s = BUCKET.total_seconds()
        empty = CallBucket(first, {}, {})
        buckets = [self.calls.get(start, empty) for start in minutes]
        statuses = sorted({status for bucket in buckets for status in bucket.by_status})
        tools = sorted({tool for bucket in buckets for tool in bucket.by_tool})
        samples = list(self.samples)
        queue_names = sorted({name for sample in samples for name in sample.queues})
        return {
            "minutes": [start.timestamp() for start in minutes],
            "by_status": {
                status: [bucket.by_status.get(status, 0) / per_s for bucket in buckets]
                for status in statuses
            },
            "by_tool": {
                tool: [bucket.by_tool.get(tool, 0) / per_s for bucket in buckets] for tool in tools
            },
            "p50_ms": [_ms(bucket.p50_s) for bucket in buckets],
            "p99_ms": [_ms(bucket.p99_s) for bucket in buckets],
            "outbox_backlog": [self.backlog.get(start) for start in minutes],
            "samples": [sample.at.timestamp() for sample in samples],
            "queue_messages": {
                name: [_messages(sample, name) for sample in samples] for name in queue_names
            },
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _messages(sample: QueueSample, name: str) -> int | None:
    reading = sample.queues.get(name)
    return None if reading is None else reading.messages
