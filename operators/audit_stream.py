"""The `<prefix>.audit` stream from an offset: where to start, and its deliveries decoded.
Shared by `ltm audit tail` and the console's audit page."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from contracts import Event, InvalidEnvelope, Topology, decode_event, decode_superseded_event

__all__ = [
    "CLOCK_SKEW",
    "PREFETCH",
    "UNKNOWN_TIME",
    "AuditDelivery",
    "BadStart",
    "StreamStart",
    "broker_offset",
    "next_or_stop",
    "open_stream",
    "parse_start",
    "stream_offset",
]

# An integer is an offset of the stream (the console resumes an audit page from one).
StreamStart = Literal["first", "last"] | datetime | int

PREFETCH: Final = 200
# The broker stamps each chunk with its own clock, which may lag the clocks of the workers that
# wrote the events and of the reader: a broker 10.5 s behind (seen here after the machine's
# clock was stepped) skipped every event of those seconds. So a time start is sought this much
# earlier, and `open_stream` drops the events before it by their own time.
CLOCK_SKEW: Final = timedelta(minutes=1)
# The time of an event that carries none: later than any start, so a TIME start keeps it.
UNKNOWN_TIME: Final = datetime.max.replace(tzinfo=UTC)


class BadStart(ValueError):
    """`--from` is neither first, last nor a time."""


def parse_start(text: str) -> StreamStart:
    """`first`, `last`, an RFC 3339 time, or `YYYY-MM-DD[ HH:MM[:SS]]`; times without an
    offset are UTC."""
    lowered = text.strip().lower()
    if lowered == "first":
        return "first"
    if lowered == "last":
        return "last"
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadStart(
            f"--from must be first, last, or a time such as 2025-01-31T12:00:00Z "
            f"or '2025-01-31 12:00' (UTC), not {text}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def broker_offset(origin: StreamStart) -> StreamStart:
    """The `x-stream-offset` the broker is asked for: a time start `CLOCK_SKEW` earlier."""
    return origin - CLOCK_SKEW if isinstance(origin, datetime) else origin


@dataclass(frozen=True, slots=True)
class AuditDelivery:
    """One delivery of the stream: its event (None when it is not one, and why: `problem`)
    and when it occurred.

    A `memory.*` event of schema_version 1, from before the upgrade that took the texts out of
    the stream, is read as its version-2 event (`superseded`): its texts are never shown from
    the stream, only from its revision, like a current event's.
    """

    message: AbstractIncomingMessage
    event: Event | None
    problem: str
    occurred: datetime
    superseded: bool = False

    @classmethod
    def of(cls, message: AbstractIncomingMessage) -> AuditDelivery:
        superseded = False
        try:
            event: Event | None = decode_event(message.body)
            problem = ""
        except InvalidEnvelope as error:
            event, problem = None, str(error)
            with contextlib.suppress(InvalidEnvelope):
                event, problem, superseded = decode_superseded_event(message.body), "", True
        return cls(message, event, problem, _occurred_at(event, message), superseded)


def _occurred_at(event: Event | None, message: AbstractIncomingMessage) -> datetime:
    if event is not None:
        return event.occurred_at
    stamp = message.timestamp
    if stamp is None:
        return UNKNOWN_TIME
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def stream_offset(message: AbstractIncomingMessage) -> int:
    """The delivery's offset in the stream; -1 when the broker did not say."""
    offset = (message.headers or {}).get("x-stream-offset")
    return offset if isinstance(offset, int) else -1


async def next_or_stop(
    deliveries: asyncio.Queue[AbstractIncomingMessage],
    stop: asyncio.Event,
    patience: float | None,
) -> AbstractIncomingMessage | None:
    """The next delivery; None once `stop` is set or `patience` seconds passed without one."""
    getting = asyncio.ensure_future(deliveries.get())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({getting, stopping}, timeout=patience, return_when="FIRST_COMPLETED")
    finally:
        stopping.cancel()
        if not getting.done():
            getting.cancel()
    if getting.done() and not getting.cancelled():
        return getting.result()
    return None


@asynccontextmanager
async def open_stream(
    connection: AbstractConnection,
    topology: Topology,
    origin: StreamStart,
) -> AsyncIterator[tuple[asyncio.Queue[AbstractIncomingMessage], bool]]:
    """Deliveries from `origin`, in stream order, and whether the stream surely holds events
    (its count lags, so False proves nothing). From a time, the first delivery is the first
    event at or after it by the event's own time. Streams need a prefetch and manual acks."""
    since = origin if isinstance(origin, datetime) else None
    async with _channel(connection) as channel:
        await channel.set_qos(prefetch_count=PREFETCH)
        stream = await channel.declare_queue(topology.audit_stream, passive=True)
        holds_events = bool(stream.declaration_result.message_count)
        deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

        async def on_message(message: AbstractIncomingMessage) -> None:
            # The broker was asked for a skew earlier, and starts at a whole chunk besides.
            if since is not None and AuditDelivery.of(message).occurred < since:
                await message.ack()
                return
            deliveries.put_nowait(message)  # no await before: arrival order is kept

        await stream.consume(on_message, arguments={"x-stream-offset": broker_offset(origin)})
        yield deliveries, holds_events


@asynccontextmanager
async def _channel(connection: AbstractConnection) -> AsyncIterator[AbstractChannel]:
    channel = await connection.channel()
    try:
        yield channel
    finally:
        if not channel.is_closed:
            await channel.close()
