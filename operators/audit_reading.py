"""Reading the audit stream from an offset to the end of a window, or on until stopped: the
use case behind `ltm audit tail`.

A stream never says "end", and its message count lags (the broker refreshes it about once a
second), so without `follow` the reading stops after an idle interval with no delivery, or at
the first event that occurred after the reading began (under steady traffic it would never be
idle). Before the first delivery it waits longer: a stream consumer takes a moment to attach,
and from `first` or `last` a stream known to be non-empty owes at least one delivery.

The stream offset `last` is the start of the stream's last chunk, which may hold many events:
only the chunk's final event is shown (then, with `follow`, what comes after).

Deliveries are shown in batches, what arrived before the reading would wait for more, so that
whoever shows them (joining each change's texts from its revision) asks the database once per
batch, not once per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from aio_pika.abc import AbstractIncomingMessage

from infra.messaging import amqp
from infra.settings import Settings
from operators.audit_stream import (
    PREFETCH,
    UNKNOWN_TIME,
    AuditDelivery,
    StreamStart,
    next_or_stop,
    open_stream,
)

__all__ = [
    "ATTACH_S",
    "BATCH_MAX",
    "CHUNK_GAP_S",
    "IDLE_S",
    "OWED_S",
    "ShowDeliveries",
    "read_audit",
]

# Without follow: stop after this long with no delivery.
IDLE_S: Final = 1.0
# Before the first delivery: the consumer attaching, or the stream being empty.
ATTACH_S: Final = 2.0
# Before the first delivery of a stream known to hold something, read from first or last.
OWED_S: Final = 10.0
# The broker sends a chunk's events in one burst: a pause this long ends the chunk.
CHUNK_GAP_S: Final = 0.3

# The most deliveries shown in one batch (as many as the broker sends unacknowledged).
BATCH_MAX: Final = PREFETCH

# Called with each batch of deliveries to show, in stream order.
ShowDeliveries = Callable[[Sequence[AuditDelivery]], Awaitable[None]]


async def read_audit(
    settings: Settings,
    origin: StreamStart,
    show: ShowDeliveries,
    *,
    follow: bool,
    stop: asyncio.Event,
    idle_s: float = IDLE_S,
) -> bool:
    """Shows the stream's events from `origin`: those it held when the reading began, or,
    with `follow`, on until `stop` is set. True when the broker connection was lost (the
    reading ended early). Raises `ChannelNotFoundEntity` when there is no audit stream."""
    topology = settings.topology
    connection = await amqp.connect(settings)
    # A plain connection reports its loss only to callbacks: the reading must not wait forever.
    lost = asyncio.Event()

    def on_close(*_: object) -> None:
        lost.set()
        stop.set()

    connection.close_callbacks.add(on_close)
    reading = _Reading(origin, follow, stop, idle_s, show)
    try:
        async with open_stream(connection, topology, origin) as (deliveries, holds_events):
            await reading.run(deliveries, holds_events)
    finally:
        broken = lost.is_set()
        await connection.close()
    return broken


@dataclass(slots=True)
class _Reading:
    """One reading: where it starts, when it stops, what it shows."""

    origin: StreamStart
    follow: bool
    stop: asyncio.Event
    idle_s: float
    show: ShowDeliveries
    # Deliveries to show, in stream order, not yet handed to `show`.
    pending: list[AuditDelivery] = field(default_factory=list)

    async def run(
        self, deliveries: asyncio.Queue[AbstractIncomingMessage], holds_events: bool
    ) -> None:
        began = datetime.now(UTC)
        # Without follow: what the stream held when the reading began, and no more.
        window_end = None if self.follow else began
        # The offset `last` is the stream's last chunk, which may hold many events: each is
        # held back until the next shows it was not the last. The chunk is over at an event
        # newer than the reading, or at a pause in the burst the broker sends a chunk in.
        in_last_chunk = self.origin == "last"
        held: AuditDelivery | None = None
        seen_any = False
        while not self.stop.is_set():
            if deliveries.empty() or len(self.pending) >= BATCH_MAX:
                await self._flush()
            patience = CHUNK_GAP_S if held is not None else self._patience(seen_any, holds_events)
            message = await next_or_stop(deliveries, self.stop, patience)
            if message is None:
                if held is not None and not self.stop.is_set():
                    await self._release(held)
                    in_last_chunk, held = False, None
                    continue
                break
            delivery = AuditDelivery.of(message)
            seen_any = True
            if in_last_chunk:
                if not began < delivery.occurred < UNKNOWN_TIME:
                    if held is not None:
                        await held.message.ack()
                    held = delivery
                    continue
                await self._release(held)
                in_last_chunk, held = False, None
            # An event of unknown time is shown, not taken for one that came after.
            if window_end is not None and window_end < delivery.occurred < UNKNOWN_TIME:
                break
            self.pending.append(delivery)
            await message.ack()
        await self._release(held)
        await self._flush()

    async def _release(self, held: AuditDelivery | None) -> None:
        """Shows the event held back as the last one, if any."""
        if held is not None:
            self.pending.append(held)
            await held.message.ack()

    async def _flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            await self.show(batch)

    def _patience(self, seen_any: bool, holds_events: bool) -> float | None:
        if self.follow:
            return None
        if seen_any:
            return self.idle_s
        if holds_events and self.origin in ("first", "last"):
            return max(self.idle_s, OWED_S)
        return max(self.idle_s, ATTACH_S)
