"""`ltm audit tail --from first|last|TIME [--follow] [--json]`: prints the `<prefix>.audit` stream.

A stream never says "end", and its message count lags (the broker refreshes it about once a
second), so without `--follow` the tail stops after an idle interval with no delivery, or at
the first event that occurred after the tail began (under steady traffic it would never be
idle). Before the first delivery it waits longer: a stream consumer takes a moment to attach,
and from `first` or `last` a stream known to be non-empty owes at least one delivery. A lost
broker connection ends the tail, with or without `--follow`, with exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal, TextIO

import aio_pika
import orjson
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    Event,
    InvalidEnvelope,
    MemoryChanged,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    decode_event,
)
from infra.settings import Settings

__all__ = [
    "IDLE_S",
    "StreamStart",
    "event_line",
    "parse_start",
    "run_command",
    "tail_audit",
]

StreamStart = Literal["first", "last"] | datetime

# Without --follow: stop after this long with no delivery.
IDLE_S: Final = 1.0
# Before the first delivery: the consumer attaching, or the stream being empty.
ATTACH_S: Final = 2.0
# Before the first delivery of a stream known to hold something, read from first or last.
OWED_S: Final = 10.0
PREFETCH: Final = 200
# The time of an event that carries none: later than any start, so a TIME start keeps it.
_UNKNOWN_TIME: Final = datetime.max.replace(tzinfo=UTC)
CONTENT_PREVIEW: Final = 48


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
            f"or '2025-01-31 12:00' (UTC); got {text!r}"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def run_command(settings: Settings, args: argparse.Namespace) -> int:
    """`ltm audit tail …`, as `worker.cli` parsed it."""
    if args.audit_command != "tail":
        print(f"unknown audit action {args.audit_command!r}", file=sys.stderr)
        return 2
    return await tail_audit(settings, args.start, follow=args.follow, as_json=args.as_json)


async def tail_audit(
    settings: Settings,
    start: str = "first",
    *,
    follow: bool = False,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stop: asyncio.Event | None = None,
    idle_s: float = IDLE_S,
) -> int:
    """Prints the audit stream from `start`; with `follow`, until SIGINT/SIGTERM (or `stop`
    when given).

    Exit code 0; 2 for a bad `start`; 1 when the stream does not exist or the broker
    connection is lost.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        origin = parse_start(start)
    except BadStart as error:
        print(error, file=err)
        return 2
    # A caller's own event (tests, an embedding process) replaces the signal handlers.
    on_signals = stop is None
    stop = stop or asyncio.Event()
    tail = _Tail(origin, follow, as_json, stop, idle_s, out, err)
    topology = Topology(settings.amqp_prefix)
    connection = await aio_pika.connect(settings.amqp_url)
    # A plain connection reports its loss only to callbacks: the tail must not wait on forever.
    lost = asyncio.Event()

    def on_close(*_: object) -> None:
        lost.set()
        stop.set()

    connection.close_callbacks.add(on_close)
    try:
        with _stop_on_signals(stop, enabled=on_signals):
            async with _stream(connection, topology, origin) as (deliveries, holds_events):
                await tail.run(deliveries, holds_events)
    except ChannelNotFoundEntity:
        print(f"{topology.audit_stream} does not exist: run `ltm topology` first", file=err)
        return 1
    finally:
        broken = lost.is_set()
        await connection.close()
    if broken:
        print("the broker connection was lost; the tail ended early", file=err)
        return 1
    return 0


@dataclass(frozen=True, slots=True)
class _Tail:
    """One `audit tail` run: where it starts, how it prints, when it stops."""

    origin: StreamStart
    follow: bool
    as_json: bool
    stop: asyncio.Event
    idle_s: float
    out: TextIO
    err: TextIO

    async def run(
        self, deliveries: asyncio.Queue[AbstractIncomingMessage], holds_events: bool
    ) -> None:
        # Without --follow: what the stream held when the tail began, and no more.
        began = None if self.follow else datetime.now(UTC)
        seen_any = False
        while not self.stop.is_set():
            patience = None if self.follow else self._patience(seen_any, holds_events)
            message = await _next_or_stop(deliveries, self.stop, patience)
            if message is None:
                return
            try:
                event: Event | None = decode_event(message.body)
                problem = ""
            except InvalidEnvelope as error:
                event, problem = None, str(error)
            occurred = _occurred_at(event, message)
            # An event of unknown time is printed, not taken for one that came after.
            if began is not None and began < occurred < _UNKNOWN_TIME:
                return
            seen_any = True
            # A timestamp offset starts at the chunk holding that time: skip its earlier events.
            if not (isinstance(self.origin, datetime) and occurred < self.origin):
                self._print(message, event, problem)
            await message.ack()

    def _patience(self, seen_any: bool, holds_events: bool) -> float:
        if seen_any:
            return self.idle_s
        if holds_events and self.origin in ("first", "last"):
            return max(self.idle_s, OWED_S)
        return max(self.idle_s, ATTACH_S)

    def _print(self, message: AbstractIncomingMessage, event: Event | None, problem: str) -> None:
        if self.as_json:
            line = _json_line(message.body)
            if line is None:
                print(f"offset {_offset(message)}: not JSON, skipped ({problem})", file=self.err)
                return
        elif event is None:
            line = f"{_time(message.timestamp)}  ?  {message.routing_key}  ({problem})"
        else:
            line = event_line(event)
        print(line, file=self.out, flush=True)


async def _next_or_stop(
    deliveries: asyncio.Queue[AbstractIncomingMessage],
    stop: asyncio.Event,
    patience: float | None,
) -> AbstractIncomingMessage | None:
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


def event_line(event: Event) -> str:
    """One readable line: time, event type, tool call, then what the event is about."""
    parts = [_time(event.occurred_at), f"{event.event_type:<19}"]
    tool_call_id = event.correlation_id
    parts.append(f"call={tool_call_id}" if tool_call_id else "call=-")
    parts.extend(_details(event))
    return "  ".join(parts)


def _details(event: Event) -> Iterator[str]:
    if isinstance(event, MemoryChanged):
        yield f"{event.scope} #{event.memory_id}"
        yield f"rev={event.revision_id}"
        yield f"guild={event.guild_id or 'dm'}"
        if event.owner_id:
            yield f"owner={event.owner_id}"
        yield f"actor={event.actor_id}"
        after = "(deleted)" if event.content_after is None else _preview(event.content_after)
        yield f"{_preview(event.content_before)} → {after}"
    elif isinstance(event, ToolCallCompleted):
        yield f"{event.status.value}"
        yield f"shard={event.shard_id}"
        if event.data.memory_id is not None:
            yield f"{event.data.scope or '-'} #{event.data.memory_id}"
    elif isinstance(event, EmbedRequested):
        yield f"{event.kind}"
        yield f"channel={event.channel_id}"
        yield f"shard={event.shard_id}"
    elif isinstance(event, CacheInvalidate):
        yield f"{event.cache}={event.key}"
    elif isinstance(event, ToolCallRequested):
        yield f"{event.tool_name}"
        yield f"guild={event.context.guild_id or 'dm'}"


def _preview(content: str) -> str:
    flat = " ".join(content.split())
    if len(flat) > CONTENT_PREVIEW:
        flat = flat[: CONTENT_PREVIEW - 1] + "…"
    return f'"{flat}"'


def _json_line(body: bytes) -> str | None:
    try:
        # Re-encoded compactly: one event, one line, whatever the producer's formatting.
        return orjson.dumps(orjson.loads(body)).decode()
    except orjson.JSONDecodeError:
        return None


def _occurred_at(event: Event | None, message: AbstractIncomingMessage) -> datetime:
    if event is not None:
        return event.occurred_at
    stamp = message.timestamp
    if stamp is None:
        return _UNKNOWN_TIME
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _time(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _offset(message: AbstractIncomingMessage) -> int:
    offset = (message.headers or {}).get("x-stream-offset")
    return offset if isinstance(offset, int) else -1


@asynccontextmanager
async def _stream(
    connection: AbstractConnection,
    topology: Topology,
    origin: StreamStart,
) -> AsyncIterator[tuple[asyncio.Queue[AbstractIncomingMessage], bool]]:
    """Deliveries from `origin`, in stream order, and whether the stream surely holds events
    (its count lags, so False proves nothing). Streams need a prefetch and manual acks."""
    async with _channel(connection) as channel:
        await channel.set_qos(prefetch_count=PREFETCH)
        stream = await channel.declare_queue(topology.audit_stream, passive=True)
        holds_events = bool(stream.declaration_result.message_count)
        deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

        async def on_message(message: AbstractIncomingMessage) -> None:
            deliveries.put_nowait(message)  # no await before: arrival order is kept

        await stream.consume(on_message, arguments={"x-stream-offset": origin})
        yield deliveries, holds_events


@asynccontextmanager
async def _channel(connection: AbstractConnection) -> AsyncIterator[AbstractChannel]:
    channel = await connection.channel()
    try:
        yield channel
    finally:
        if not channel.is_closed:
            await channel.close()


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event, *, enabled: bool) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if enabled:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or no signals here: `stop` still works
            installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
