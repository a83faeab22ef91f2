"""The dead-letter queue, read and emptied: the use cases behind `ltm dlq list|purge` and the
console's dead-letter page. Listing consumes nothing: what it takes is handed back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from contracts import Topology
from infra.messaging import amqp
from infra.settings import Settings
from operators.dead_letter_records import DeadLetter, HeldDeadLetter, describe

__all__ = [
    "DEFAULT_LIMIT",
    "DELIVERY_PATIENCE_S",
    "ConfirmPurge",
    "Purge",
    "dead_letter_channel",
    "dead_letter_queue",
    "hold",
    "inspect_dead_letters",
    "message_count",
    "purge",
    "read_dead_letters",
    "take_deliveries",
]

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
    settings: Settings, *, limit: int = DEFAULT_LIMIT
) -> tuple[list[DeadLetter], int]:
    """The dead letters (at most `limit`) and how many the queue holds; consumes nothing."""
    held, total = await read_dead_letters(settings, limit=limit)
    return [letter.entry for letter in held], total


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


async def purge(settings: Settings, *, confirm: ConfirmPurge | None = None) -> Purge:
    """Empties the dead-letter queue; with `confirm`, only once it said yes (it is not asked
    when the queue is empty). Raises `ChannelNotFoundEntity` when there is no dead-letter
    queue."""
    topology = settings.topology
    async with dead_letter_channel(settings) as channel:
        queue = await dead_letter_queue(channel, topology)
        found = message_count(queue)
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
