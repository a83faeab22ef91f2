"""The dead-letter queue, for the operators: what a dead letter is, read from the message the
queue holds; listing the queue (consuming nothing: what it takes is handed back); purging it;
and sending dead letters back to the worker, each copy leaving the queue only once the broker
confirmed its republish. The use cases behind `ltm dlq list|replay|purge` and the console's
dead-letter page.

Two kinds of message land in `<prefix>.tool_calls.dead`, both with their original body, routing
key and properties: those the worker dead-letters carry `x-ltm-error` and `x-ltm-failed-at`;
those the broker dead-letters (at the work queue's delivery limit) carry `x-death` instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from aio_pika.exceptions import DeliveryError, PublishError

from contracts import Topology, worker_queue_arguments
from contracts.dead_letters import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FAILED_AT_HEADER,
    ORIGINAL_USER_ID_HEADER,
)
from infra.messaging import amqp
from infra.observability import tracing
from infra.settings import Settings

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_RATE",
    "DELIVERY_PATIENCE_S",
    "REPLAY_WINDOW",
    "ConfirmPurge",
    "DeadLetter",
    "DeadLetterFilter",
    "DeadLetterGroup",
    "DeadLetterSource",
    "HeldDeadLetter",
    "Pace",
    "Purge",
    "ReplayReport",
    "Replayed",
    "dead_letter_channel",
    "dead_letter_queue",
    "death_entry",
    "describe",
    "group_dead_letters",
    "hold",
    "inspect_dead_letters",
    "message_count",
    "original_routing_key",
    "purge",
    "read_dead_letters",
    "replay",
    "replay_message",
    "take_deliveries",
]

DeadLetterSource = Literal["worker", "broker"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead-lettered message, as the tools show it."""

    event_id: str | None
    tool_call_id: str | None
    routing_key: str
    source: DeadLetterSource
    reason: str
    failed_at: datetime | None
    attempts: int | None
    # What it is grouped by: the worker's error up to its first ":", or the broker's x-death
    # reason (`delivery_limit`, `expired`, ...).
    cause: str = ""
    # `context.guild_id` of a body that parses as a tool call; None for a DM or no such body.
    guild_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeldDeadLetter:
    """A dead letter with its body, as the broker holds it (for a person to read)."""

    entry: DeadLetter
    body: bytes
    content_type: str | None


def describe(message: AbstractIncomingMessage, topology: Topology) -> DeadLetter:
    headers = message.headers or {}
    body = _body_fields(message.body)
    death = death_entry(headers, topology)
    # The worker's own reason wins: its copy keeps whatever headers the delivery had.
    if death is None or ERROR_HEADER in headers:
        source: DeadLetterSource = "worker"
        reason = str(headers.get(ERROR_HEADER) or "unknown (no x-ltm-error header)")
        cause = reason.split(":", 1)[0].strip()
        failed_at = _parse_time(headers.get(FAILED_AT_HEADER))
        attempts = _worker_attempts(message, headers)
    else:
        source = "broker"
        cause = str(death.get("reason", "unknown"))
        reason = f"{cause} (queue {death.get('queue', '?')})"
        failed_at = _parse_time(death.get("time"))
        attempts = _broker_attempts(death, topology)
    return DeadLetter(
        event_id=message.message_id or _text(body.get("event_id")),
        tool_call_id=message.correlation_id or _text(body.get("tool_call_id")),
        routing_key=original_routing_key(message, topology),
        source=source,
        reason=reason,
        failed_at=failed_at,
        attempts=attempts,
        cause=cause,
        guild_id=_guild_id(body),
    )


def _guild_id(body: Mapping[str, Any]) -> str | None:
    context = body.get("context")
    if not isinstance(context, Mapping):
        return None
    guild = context.get("guild_id")
    # A Discord id travels as a string; an integer one is still the same server.
    if isinstance(guild, int) and not isinstance(guild, bool):
        return str(guild)
    return _text(guild)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters an operator means: each criterion given must hold (none given: every
    one). `error` is a case-insensitive substring of the reason (`x-ltm-error`, or the broker's
    x-death reason); `tool` the original routing key; `guild` the body's `context.guild_id`;
    `since` failed at or after (a letter with no failure time does not match it)."""

    error: str | None = None
    tool: str | None = None
    guild: str | None = None
    since: datetime | None = None

    @property
    def is_empty(self) -> bool:
        return self.error is None and self.tool is None and self.guild is None and not self.since

    def matches(self, letter: DeadLetter) -> bool:
        if self.error is not None and self.error.casefold() not in letter.reason.casefold():
            return False
        if self.tool is not None and letter.routing_key != self.tool:
            return False
        if self.guild is not None and letter.guild_id != self.guild:
            return False
        if self.since is not None:
            return letter.failed_at is not None and letter.failed_at >= self.since
        return True

    def as_record(self) -> dict[str, str]:
        """The criteria given, as the audit record and `--json` show them."""
        given = {"error": self.error, "tool": self.tool, "guild": self.guild}
        record = {name: value for name, value in given.items() if value is not None}
        if self.since is not None:
            record["since"] = self.since.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return record


@dataclass(frozen=True, slots=True)
class DeadLetterGroup:
    """The dead letters of one cause and tool (`ltm dlq list --group`)."""

    reason: str
    tool: str
    count: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None


def group_dead_letters(letters: Sequence[DeadLetter]) -> list[DeadLetterGroup]:
    """Counts by cause and tool, the largest group first (then by reason and tool)."""
    members: dict[tuple[str, str], list[DeadLetter]] = {}
    for letter in letters:
        members.setdefault((letter.cause, letter.routing_key), []).append(letter)
    groups = []
    for (reason, tool), group in members.items():
        times = [letter.failed_at for letter in group if letter.failed_at is not None]
        groups.append(
            DeadLetterGroup(
                reason, tool, len(group), min(times, default=None), max(times, default=None)
            )
        )
    return sorted(groups, key=lambda group: (-group.count, group.reason, group.tool))


def original_routing_key(message: AbstractIncomingMessage, topology: Topology) -> str:
    """The key it was first published with: the broker keeps it in `x-death`; the worker
    dead-letters with the delivery's own routing key."""
    death = death_entry(message.headers or {}, topology)
    if death is not None:
        keys = death.get("routing-keys")
        if isinstance(keys, Sequence) and keys and isinstance(keys[0], str):
            return keys[0]
    return message.routing_key or ""


def death_entry(headers: Mapping[str, Any], topology: Topology) -> Mapping[str, Any] | None:
    """The x-death entry of the work queue, else the most recent one."""
    deaths = headers.get("x-death")
    if not isinstance(deaths, Sequence) or isinstance(deaths, str | bytes) or not deaths:
        return None
    entries = [entry for entry in deaths if isinstance(entry, Mapping)]
    for entry in entries:
        if entry.get("queue") == topology.worker_queue:
            return entry
    return entries[0] if entries else None


def _broker_attempts(death: Mapping[str, Any], topology: Topology) -> int | None:
    count = death.get("count")
    if not isinstance(count, int):
        return None
    if death.get("reason") == "delivery_limit" and death.get("queue") == topology.worker_queue:
        # Each such death is the limit's worth of redeliveries plus the first delivery.
        return count * (int(worker_queue_arguments(topology)["x-delivery-limit"]) + 1)
    return count


def _worker_attempts(message: AbstractIncomingMessage, headers: Mapping[str, Any]) -> int | None:
    attempts = headers.get(ATTEMPTS_HEADER)
    if isinstance(attempts, int):
        return attempts
    # The worker copies the work queue's x-delivery-count; once the dead-letter queue itself
    # has redelivered the message (a listing returns it), that header is the DLQ's own count.
    count = headers.get("x-delivery-count")
    if isinstance(count, int) and not message.redelivered:
        return count + 1
    return None


def _body_fields(body: bytes) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


# -- the queue, listed and purged ------------------------------------------------------------

# How many messages one command holds unacknowledged at most (list, replay --id).
DEFAULT_LIMIT: Final = 10_000
# The broker said these messages are there: wait this long for each before giving up on it
# (another consumer may hold some unacknowledged, and those never come).
DELIVERY_PATIENCE_S: Final = 3.0

# Asked before a purge, with how many messages the queue holds and its name.
ConfirmPurge = Callable[[int, str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Purge:
    """What a purge found and did; `refused` when the confirmation said no."""

    queue: str
    found: int
    removed: int
    refused: bool = False


@asynccontextmanager
async def dead_letter_channel(settings: Settings) -> AsyncIterator[AbstractChannel]:
    """A channel with publisher confirms on a connection of its own, closed at the end.
    A plain connection: a one-shot action must fail loudly, not reconnect mid-replay."""
    connection = await amqp.connect(settings)
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            yield channel
        finally:
            if not channel.is_closed:
                await channel.close()
    finally:
        await connection.close()


async def dead_letter_queue(channel: AbstractChannel, topology: Topology) -> AbstractQueue:
    """Raises `ChannelNotFoundEntity` when there is no dead-letter queue."""
    return await channel.declare_queue(topology.dead_letter_queue, passive=True)


def message_count(queue: AbstractQueue) -> int:
    return int(queue.declaration_result.message_count or 0)


async def inspect_dead_letters(
    settings: Settings,
    *,
    limit: int = DEFAULT_LIMIT,
    dead_letter_filter: DeadLetterFilter | None = None,
) -> tuple[list[DeadLetter], int]:
    """The dead letters (of the first `limit`, those that match the filter) and how many the
    queue holds; consumes nothing."""
    held, total = await read_dead_letters(settings, limit=limit)
    matching = dead_letter_filter or DeadLetterFilter()
    return [letter.entry for letter in held if matching.matches(letter.entry)], total


async def read_dead_letters(
    settings: Settings, *, limit: int = DEFAULT_LIMIT
) -> tuple[list[HeldDeadLetter], int]:
    """`inspect_dead_letters` with each body; raises `ChannelNotFoundEntity` when there is no
    dead-letter queue."""
    topology = settings.topology
    async with dead_letter_channel(settings) as channel:
        queue = await dead_letter_queue(channel, topology)
        total = message_count(queue)
        held = await hold(queue, min(total, limit))
        # Closing the channel without acknowledging hands every message back to the queue.
        return [
            HeldDeadLetter(describe(message, topology), message.body, message.content_type)
            for message in held
        ], total


async def purge(
    settings: Settings,
    *,
    confirm: ConfirmPurge | None = None,
    dead_letter_filter: DeadLetterFilter | None = None,
) -> Purge:
    """Empties the dead-letter queue, or with a filter removes the letters that match it (of
    the first `DEFAULT_LIMIT`; the others are handed back untouched); with `confirm`, only once
    it said yes (it is not asked when there is nothing to remove). Raises
    `ChannelNotFoundEntity` when there is no dead-letter queue."""
    topology = settings.topology
    async with dead_letter_channel(settings) as channel:
        queue = await dead_letter_queue(channel, topology)
        found = message_count(queue)
        if dead_letter_filter is not None and not dead_letter_filter.is_empty:
            held = await hold(queue, min(found, DEFAULT_LIMIT))
            matching = [m for m in held if dead_letter_filter.matches(describe(m, topology))]
            found = len(matching)
            if confirm is not None and (found == 0 or not await confirm(found, queue.name)):
                return Purge(queue.name, found, 0, refused=found > 0)
            for message in matching:
                await message.ack()
            return Purge(queue.name, found, found)
        if confirm is not None:
            if found == 0:
                return Purge(queue.name, 0, 0)
            if not await confirm(found, queue.name):
                return Purge(queue.name, found, 0, refused=True)
        removed = int((await queue.purge()).message_count or 0)
        return Purge(queue.name, found, removed)


async def hold(queue: AbstractQueue, count: int) -> list[AbstractIncomingMessage]:
    """Takes up to `count` messages without acknowledging them; the caller's channel returns
    those it does not ack when it closes."""
    return [message async for message in take_deliveries(queue, count, prefetch=count)]


async def take_deliveries(
    queue: AbstractQueue,
    count: int,
    *,
    prefetch: int,
    waiting_for_acks: Callable[[], bool] = lambda: False,
) -> AsyncIterator[AbstractIncomingMessage]:
    """Up to `count` deliveries, unacknowledged; stops early when one does not come within
    `DELIVERY_PATIENCE_S`, unless `waiting_for_acks()`: at most `prefetch` are outstanding
    unacknowledged at once, so a full window delivers nothing until the caller acks."""
    if count <= 0:
        return
    await queue.channel.set_qos(prefetch_count=min(count, prefetch))
    deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

    async def on_message(message: AbstractIncomingMessage) -> None:
        deliveries.put_nowait(message)

    tag = await queue.consume(on_message)
    try:
        taken = 0
        while taken < count:
            try:
                message = await asyncio.wait_for(deliveries.get(), DELIVERY_PATIENCE_S)
            except TimeoutError:
                if waiting_for_acks():
                    continue
                return
            taken += 1
            yield message
    finally:
        if not queue.channel.is_closed:
            await queue.cancel(tag)


# -- replays --------------------------------------------------------------------------------

# Outstanding replays (published, not yet confirmed and acked) at once: confirms come back
# windowed, not one round trip per letter.
REPLAY_WINDOW: Final = 100
# Replayed calls a second, unless the operator says otherwise (`--rate`; 0 for no limit).
DEFAULT_RATE: Final = 50
# How far behind its schedule a pace may fall before it starts a new one: after a stall, at
# most this many seconds' worth of calls go at once.
_PACE_SLACK_S: Final = 1.0

# Headers that describe a previous life of the message, not the message itself.
_LIFE_HEADER_PREFIXES: Final = ("x-ltm-", "x-death", "x-first-death-", "x-last-death-")
_LIFE_HEADERS: Final = frozenset({"x-delivery-count"})


class Pace:
    """At most `rate` a second (0: no limit), on a schedule of the monotonic clock: the n-th
    slot is n/rate after the first, so a late wake-up is made up by the next slot instead of
    adding up as sleeps per message would."""

    def __init__(
        self,
        rate: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if rate < 0:
            raise ValueError(f"a rate is 0 (no limit) or more, not {rate}")
        self._interval = 1.0 / rate if rate else 0.0
        self._clock, self._sleep = clock, sleep
        self._next: float | None = None

    async def wait(self) -> None:
        """Returns at the next slot of the schedule."""
        if not self._interval:
            return
        now = self._clock()
        if self._next is None or now - self._next > _PACE_SLACK_S:
            self._next = now
        delay = self._next - now
        self._next += self._interval
        if delay > 0:
            await self._sleep(delay)


@dataclass(frozen=True, slots=True)
class Replayed:
    """One dead letter sent back, or the reason it was not (`error`)."""

    entry: DeadLetter
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay did."""

    replays: list[Replayed]
    total: int
    unknown_id: str | None = None
    # `--all`: ends with how many of the queue's messages went back.
    whole_queue: bool = False
    # A replay by filter: `total` is how many matched, `unread` how many of the queue's
    # messages it did not get to look at (held by another consumer).
    dead_letter_filter: DeadLetterFilter | None = None
    unread: int = 0

    @property
    def replayed(self) -> list[DeadLetter]:
        return [replay.entry for replay in self.replays if replay.error is None]

    @property
    def failed(self) -> list[Replayed]:
        return [replay for replay in self.replays if replay.error is not None]

    @property
    def not_reached(self) -> int:
        """Messages the queue held that this replay did not get to (run it again)."""
        return self.total - len(self.replays) + self.unread

    @property
    def complete(self) -> bool:
        """The dead letter named was found, and every message looked for went back."""
        return self.unknown_id is None and len(self.replayed) == self.total and not self.unread


async def replay(
    settings: Settings,
    *,
    event_id: str | None,
    dead_letter_filter: DeadLetterFilter | None = None,
    rate: float = 0,
    limit: int = DEFAULT_LIMIT,
) -> ReplayReport:
    """Replays the dead letter with `event_id` (every copy of it); else those that match the
    filter (of the first `limit`), or every dead letter there is now when there is no filter,
    at most `rate` a second (0: no limit). Each copy is acked only after the broker confirmed
    its republish; the letters that do not match are handed back untouched. Raises
    `ChannelNotFoundEntity` when there is no dead-letter queue."""
    topology = settings.topology
    async with dead_letter_channel(settings) as channel:
        queue = await dead_letter_queue(channel, topology)
        raw = await channel.get_underlay_channel()
        assert isinstance(raw, aiormq.Channel)  # `wait` is the concrete channel's
        replayer = _Replayer(raw, topology, settings.amqp_user)
        if event_id is not None:
            return await replayer.one(queue, event_id, limit)
        return await replayer.matching(
            queue, dead_letter_filter or DeadLetterFilter(), Pace(rate), limit
        )


def replay_message(message: AbstractIncomingMessage, *, user_id: str | None) -> aio_pika.Message:
    """The message as it was first published: same body and properties, no dead-letter marks,
    published as `user_id` (the operator's broker user: the broker refuses any other). The
    user it was first published as stays in `x-ltm-original-user-id`."""
    came = message.headers or {}
    headers = {
        name: value
        for name, value in came.items()
        if name not in _LIFE_HEADERS and not name.startswith(_LIFE_HEADER_PREFIXES)
    }
    original = came.get(ORIGINAL_USER_ID_HEADER) or message.user_id
    if original:
        headers[ORIGINAL_USER_ID_HEADER] = original
    return amqp.copy_of(message, headers=headers, user_id=user_id, expiration=False)


@dataclass(frozen=True, slots=True)
class _Replayer:
    """Republishes dead letters to the tool-call exchange, confirmed, then acks each copy.

    On the aiormq channel under the consuming one: its `basic_publish(wait=False)` does not
    hold the channel until the socket drains, so a window of publishes shares the round trips
    to the broker, as the worker's publisher does (aio-pika's `Exchange.publish` would make
    it one at a time)."""

    channel: aiormq.Channel  # with confirms, and returns raised as `PublishError`
    topology: Topology
    user_id: str | None  # the operator's broker user, on every replayed call

    async def one(self, queue: AbstractQueue, event_id: str, limit: int) -> ReplayReport:
        total = message_count(queue)
        held = await hold(queue, min(total, limit))
        # At-least-once dead-lettering may have stored a message twice: replay every copy.
        matches = [m for m in held if describe(m, self.topology).event_id == event_id]
        if not matches:
            return ReplayReport([], len(held), unknown_id=event_id)
        return ReplayReport([await self.replay(message) for message in matches], len(matches))

    async def matching(
        self, queue: AbstractQueue, dead_letter_filter: DeadLetterFilter, pace: Pace, limit: int
    ) -> ReplayReport:
        # Only what is there now: a replayed call the worker dead-letters again joins the
        # queue's tail and must not be replayed a second time in this run.
        total = message_count(queue)
        whole_queue = dead_letter_filter.is_empty
        kept = None if whole_queue else dead_letter_filter
        if total == 0:
            return ReplayReport([], 0, whole_queue=whole_queue, dead_letter_filter=kept)
        # Letters that do not match stay held, unacknowledged, until the channel closes and
        # hands them back in place: the broker must deliver all of them at once.
        count = total if whole_queue else min(total, limit)
        prefetch = REPLAY_WINDOW if whole_queue else count
        window = asyncio.Semaphore(REPLAY_WINDOW)
        results: list[asyncio.Task[Replayed]] = []
        looked_at = 0

        def confirms_pending() -> bool:
            return any(not task.done() for task in results)

        async def replay_in_window(message: AbstractIncomingMessage, entry: DeadLetter) -> Replayed:
            try:
                return await self.replay(message, entry)
            finally:
                window.release()

        async with asyncio.TaskGroup() as replays:
            async for message in take_deliveries(
                queue, count, prefetch=prefetch, waiting_for_acks=confirms_pending
            ):
                looked_at += 1
                entry = describe(message, self.topology)
                if not dead_letter_filter.matches(entry):
                    continue
                await pace.wait()
                await window.acquire()
                results.append(replays.create_task(replay_in_window(message, entry)))
        done = [task.result() for task in results]
        if whole_queue:
            return ReplayReport(done, total, whole_queue=True)
        return ReplayReport(done, len(done), dead_letter_filter=kept, unread=count - looked_at)

    async def replay(
        self, message: AbstractIncomingMessage, entry: DeadLetter | None = None
    ) -> Replayed:
        entry = entry or describe(message, self.topology)
        replayed = replay_message(message, user_id=self.user_id)
        try:
            # A trace of its own, linked to the original's (where it was dead-lettered).
            with tracing.sending(
                exchange=self.topology.tool_calls_exchange,
                routing_key=entry.routing_key,
                message_id=replayed.message_id,
                conversation_id=replayed.correlation_id,
                headers=replayed.headers,
                parent=None,
                linked_headers=message.headers,
            ):
                await self.channel.basic_publish(
                    replayed.body,
                    exchange=self.topology.tool_calls_exchange,
                    routing_key=entry.routing_key,
                    properties=replayed.properties,
                    mandatory=True,
                    wait=False,
                )
        except DeliveryError as error:
            # Unconfirmed or unroutable: the dead-letter copy stays where it is.
            return Replayed(entry, _refusal(error, entry.routing_key))
        await message.ack()
        return Replayed(entry)


def _refusal(error: DeliveryError, routing_key: str) -> str:
    if isinstance(error, PublishError):
        return f"the broker returned it: no queue is bound for routing key {routing_key}"
    return f"the broker did not confirm it ({type(error).__name__})"
