"""`ltm audit tail --from first|last|TIME [--follow] [--json]`: prints the `<prefix>.audit` stream.

A stream never says "end", and its message count lags (the broker refreshes it about once a
second), so without `--follow` the tail stops after an idle interval with no delivery, or at
the first event that occurred after the tail began (under steady traffic it would never be
idle). Before the first delivery it waits longer: a stream consumer takes a moment to attach,
and from `first` or `last` a stream known to be non-empty owes at least one delivery. A lost
broker connection ends the tail, with or without `--follow`, with exit code 1.

The stream offset `last` is the start of the stream's last chunk, which may hold many events:
the tail prints only the chunk's final event (then, with `--follow`, what comes after).
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

import orjson
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import (
    CacheInvalidate,
    DeadLettersPurged,
    DeadLettersReplayed,
    EmbedRequested,
    Event,
    InvalidEnvelope,
    MemoryChanged,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    decode_event,
)
from infra import amqp
from infra.settings import Settings
from worker.ops.output import (
    ABSENT,
    ExitCode,
    shown_content,
    shown_text,
    shown_time,
    text_width,
)

__all__ = [
    "IDLE_S",
    "TAIL_HEADER",
    "StreamStart",
    "event_details",
    "event_line",
    "open_stream",
    "parse_start",
    "run_command",
    "tail_audit",
]

# An integer is an offset of the stream (the console resumes an audit page from one).
StreamStart = Literal["first", "last"] | datetime | int

# Without --follow: stop after this long with no delivery.
IDLE_S: Final = 1.0
# Before the first delivery: the consumer attaching, or the stream being empty.
ATTACH_S: Final = 2.0
# Before the first delivery of a stream known to hold something, read from first or last.
OWED_S: Final = 10.0
PREFETCH: Final = 200
# The broker sends a chunk's events in one burst: a pause this long ends the chunk.
CHUNK_GAP_S: Final = 0.3
# The time of an event that carries none: later than any start, so a TIME start keeps it.
_UNKNOWN_TIME: Final = datetime.max.replace(tzinfo=UTC)


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


async def run_command(settings: Settings, args: argparse.Namespace) -> int:
    """`ltm audit tail …`, as `worker.cli` parsed it."""
    if args.audit_command != "tail":
        print(f"unknown audit action {args.audit_command}", file=sys.stderr)
        return ExitCode.USAGE
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
        return ExitCode.USAGE
    # A caller's own event (tests, an embedding process) replaces the signal handlers.
    on_signals = stop is None
    stop = stop or asyncio.Event()
    tail = _Tail(origin, follow, as_json, stop, idle_s, out, err)
    topology = settings.topology
    connection = await amqp.connect(settings)
    # A plain connection reports its loss only to callbacks: the tail must not wait on forever.
    lost = asyncio.Event()

    def on_close(*_: object) -> None:
        lost.set()
        stop.set()

    connection.close_callbacks.add(on_close)
    try:
        with _stop_on_signals(stop, enabled=on_signals):
            async with open_stream(connection, topology, origin) as (deliveries, holds_events):
                await tail.run(deliveries, holds_events)
    except ChannelNotFoundEntity:
        print(f"{topology.audit_stream} does not exist: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    finally:
        broken = lost.is_set()
        await connection.close()
    if broken:
        print("the broker connection was lost; the tail ended early", file=err)
        return ExitCode.FAILED
    tail.say_if_empty(topology.audit_stream)
    return ExitCode.OK


@dataclass(slots=True)
class _Tail:
    """One `audit tail` run: where it starts, how it prints, when it stops."""

    origin: StreamStart
    follow: bool
    as_json: bool
    stop: asyncio.Event
    idle_s: float
    out: TextIO
    err: TextIO
    printed: int = 0

    async def run(
        self, deliveries: asyncio.Queue[AbstractIncomingMessage], holds_events: bool
    ) -> None:
        began = datetime.now(UTC)
        # Without --follow: what the stream held when the tail began, and no more.
        window_end = None if self.follow else began
        # The offset `last` is the stream's last chunk, which may hold many events: each is
        # held back until the next shows it was not the last. The chunk is over at an event
        # newer than the tail, or at a pause in the burst the broker sends a chunk in.
        in_last_chunk = self.origin == "last"
        held: _Delivery | None = None
        seen_any = False
        while not self.stop.is_set():
            patience = CHUNK_GAP_S if held is not None else self._patience(seen_any, holds_events)
            message = await _next_or_stop(deliveries, self.stop, patience)
            if message is None:
                if held is not None and not self.stop.is_set():
                    await self._release(held)
                    in_last_chunk, held = False, None
                    continue
                break
            delivery = _Delivery.of(message)
            seen_any = True
            if in_last_chunk:
                if not began < delivery.occurred < _UNKNOWN_TIME:
                    if held is not None:
                        await held.message.ack()
                    held = delivery
                    continue
                await self._release(held)
                in_last_chunk, held = False, None
            # An event of unknown time is printed, not taken for one that came after.
            if window_end is not None and window_end < delivery.occurred < _UNKNOWN_TIME:
                break
            # A timestamp offset starts at the chunk holding that time: skip its earlier events.
            if not (isinstance(self.origin, datetime) and delivery.occurred < self.origin):
                self._print(delivery)
            await message.ack()
        await self._release(held)

    async def _release(self, held: _Delivery | None) -> None:
        """Prints the event held back as the last one, if any."""
        if held is not None:
            self._print(held)
            await held.message.ack()

    def _patience(self, seen_any: bool, holds_events: bool) -> float | None:
        if self.follow:
            return None
        if seen_any:
            return self.idle_s
        if holds_events and self.origin in ("first", "last"):
            return max(self.idle_s, OWED_S)
        return max(self.idle_s, ATTACH_S)

    def _print(self, delivery: _Delivery) -> None:
        if self.as_json:
            line = _json_line(delivery.message.body)
            if line is None:
                print(
                    f"offset {_offset(delivery.message)}: not JSON, skipped ({delivery.problem})",
                    file=self.err,
                )
                return
        else:
            if not self.printed:
                print(TAIL_HEADER, file=self.out)
            line = (
                _unreadable_line(delivery) if delivery.event is None else event_line(delivery.event)
            )
        print(line, file=self.out, flush=True)
        self.printed += 1

    def say_if_empty(self, stream: str) -> None:
        """In text mode, a line for a window without events, where a person expects one."""
        if self.printed or self.as_json or self.follow:
            return
        since = (
            f" at or after {shown_time(self.origin)}" if isinstance(self.origin, datetime) else ""
        )
        print(f"no events in {stream}{since}", file=self.out)


@dataclass(frozen=True, slots=True)
class _Delivery:
    message: AbstractIncomingMessage
    event: Event | None
    problem: str
    occurred: datetime

    @classmethod
    def of(cls, message: AbstractIncomingMessage) -> _Delivery:
        try:
            event: Event | None = decode_event(message.body)
            problem = ""
        except InvalidEnvelope as error:
            event, problem = None, str(error)
        return cls(message, event, problem, _occurred_at(event, message))


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


def _columns(*cells: str) -> str:
    """One line of the tail: fixed widths (a stream's widest cell is never known), so that a
    longer cell pushes only its own line."""
    padded = [
        cell + " " * (width - text_width(cell))
        for cell, (_, width) in zip(cells[:-1], _TAIL_COLUMNS, strict=False)
    ]
    return "  ".join([*padded, cells[-1]])


_TAIL_COLUMNS: Final = (
    ("TIME", 24),
    ("EVENT", 19),
    ("MEMORY", 8),
    ("REVISION", 8),
    ("TOOL CALL", 36),
    ("DETAILS", 0),
)
TAIL_HEADER: Final = _columns(*(name for name, _ in _TAIL_COLUMNS))


def event_line(event: Event) -> str:
    """One line under `TAIL_HEADER`: time, event type, memory, revision, tool call, then what
    else the event says."""
    memory_id: int | None = None
    revision_id: int | None = None
    if isinstance(event, MemoryChanged):
        memory_id, revision_id = event.memory_id, event.revision_id
    elif isinstance(event, ToolCallCompleted):
        memory_id = event.data.memory_id
    return _columns(
        shown_time(event.occurred_at, "milliseconds"),
        event.event_type,
        ABSENT if memory_id is None else str(memory_id),
        ABSENT if revision_id is None else str(revision_id),
        shown_text(event.correlation_id),
        " ".join(event_details(event)),
    )


def _unreadable_line(delivery: _Delivery) -> str:
    message = delivery.message
    return _columns(
        shown_time(message.timestamp, "milliseconds"),
        "(not an event)",
        ABSENT,
        ABSENT,
        shown_text(message.correlation_id),
        f"routing key {message.routing_key}: {shown_text(delivery.problem)}",
    )


def event_details(event: Event) -> Iterator[str]:
    """What else an event says, beyond its time, type, memory, revision and tool call."""
    if isinstance(event, MemoryChanged):
        yield event.scope
        yield f"guild={event.guild_id or 'dm'}"
        if event.owner_id:
            yield f"owner={event.owner_id}"
        yield f"actor={shown_text(event.actor_id)}"
        yield f"before: {shown_content(event.content_before)}"
        yield f"after: {shown_content(event.content_after)}"
    elif isinstance(event, ToolCallCompleted):
        yield event.status.value
        if event.data.scope is not None:
            yield event.data.scope
        yield f"shard={event.shard_id}"
    elif isinstance(event, EmbedRequested):
        yield event.kind
        yield f"channel={event.channel_id}"
        yield f"shard={event.shard_id}"
    elif isinstance(event, CacheInvalidate):
        yield f"cache={event.cache}"
        yield f"key={event.key}"
    elif isinstance(event, ToolCallRequested):
        yield shown_text(event.tool_name)
        yield f"guild={event.context.guild_id or 'dm'}"
    elif isinstance(event, DeadLettersReplayed):
        yield f"actor={shown_text(event.actor)}"
        yield f"replayed={len(event.replayed)}"
        yield f"failed={event.failed}"
    elif isinstance(event, DeadLettersPurged):
        yield f"actor={shown_text(event.actor)}"
        yield f"removed={event.removed}"


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


def _offset(message: AbstractIncomingMessage) -> int:
    offset = (message.headers or {}).get("x-stream-offset")
    return offset if isinstance(offset, int) else -1


@asynccontextmanager
async def open_stream(
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
