"""Sending dead letters back to the worker: the use case behind `ltm dlq replay` and the
console's replay buttons. Each copy leaves the dead-letter queue only once the broker
confirmed its republish."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import aio_pika
from aio_pika.abc import AbstractExchange, AbstractIncomingMessage, AbstractQueue
from aio_pika.exceptions import DeliveryError, PublishError

from contracts import Topology
from contracts.dead_letters import ORIGINAL_USER_ID_HEADER
from infra.observability import tracing
from infra.settings import Settings
from operators.dead_letter_queue import (
    DEFAULT_LIMIT,
    dead_letter_channel,
    dead_letter_queue,
    hold,
    message_count,
    take_deliveries,
)
from operators.dead_letter_records import DeadLetter, describe

__all__ = ["REPLAY_WINDOW", "ReplayReport", "Replayed", "replay", "replay_message"]

# Outstanding replays (publish, confirm, then ack) while replaying everything.
REPLAY_WINDOW: Final = 100

# Headers that describe a previous life of the message, not the message itself.
_LIFE_HEADER_PREFIXES: Final = ("x-ltm-", "x-death", "x-first-death-", "x-last-death-")
_LIFE_HEADERS: Final = frozenset({"x-delivery-count"})


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

    @property
    def replayed(self) -> list[DeadLetter]:
        return [replay.entry for replay in self.replays if replay.error is None]

    @property
    def failed(self) -> list[Replayed]:
        return [replay for replay in self.replays if replay.error is not None]

    @property
    def not_reached(self) -> int:
        """Messages the queue held that this replay did not get to (run it again)."""
        return self.total - len(self.replays)

    @property
    def complete(self) -> bool:
        """The dead letter named was found, and every message looked for went back."""
        return self.unknown_id is None and len(self.replayed) == self.total


async def replay(
    settings: Settings, *, event_id: str | None, limit: int = DEFAULT_LIMIT
) -> ReplayReport:
    """Replays the dead letter with `event_id` (every copy of it), or every dead letter there
    is now when None; each copy is acked only after the broker confirmed its republish.
    Raises `ChannelNotFoundEntity` when there is no dead-letter queue."""
    topology = settings.topology
    async with dead_letter_channel(settings) as channel:
        queue = await dead_letter_queue(channel, topology)
        exchange = await channel.get_exchange(topology.tool_calls_exchange)
        replayer = _Replayer(exchange, topology, settings.amqp_user)
        if event_id is not None:
            return await replayer.one(queue, event_id, limit)
        return await replayer.everything(queue)


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
    return aio_pika.Message(
        message.body,
        headers=headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=message.delivery_mode or aio_pika.DeliveryMode.PERSISTENT,
        priority=message.priority,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
        user_id=user_id,
    )


@dataclass(frozen=True, slots=True)
class _Replayer:
    """Republishes dead letters to the tool-call exchange, confirmed, then acks each copy."""

    exchange: AbstractExchange
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

    async def everything(self, queue: AbstractQueue) -> ReplayReport:
        # Only what is there now: a replayed call the worker dead-letters again joins the
        # queue's tail and must not be replayed a second time in this run.
        total = message_count(queue)
        if total == 0:
            return ReplayReport([], 0, whole_queue=True)
        results: list[asyncio.Task[Replayed]] = []

        def confirms_pending() -> bool:
            return any(not task.done() for task in results)

        async with asyncio.TaskGroup() as replays:
            async for message in take_deliveries(
                queue, total, prefetch=REPLAY_WINDOW, waiting_for_acks=confirms_pending
            ):
                results.append(replays.create_task(self.replay(message)))
        return ReplayReport([task.result() for task in results], total, whole_queue=True)

    async def replay(self, message: AbstractIncomingMessage) -> Replayed:
        entry = describe(message, self.topology)
        replayed = replay_message(message, user_id=self.user_id)
        try:
            # A trace of its own, linked to the original's (where it was dead-lettered).
            with tracing.sending(
                exchange=self.exchange.name,
                routing_key=entry.routing_key,
                message_id=replayed.message_id,
                conversation_id=replayed.correlation_id,
                headers=replayed.headers,
                parent=None,
                linked_headers=message.headers,
            ):
                await self.exchange.publish(replayed, routing_key=entry.routing_key)
        except DeliveryError as error:
            # Unconfirmed or unroutable: the dead-letter copy stays where it is.
            return Replayed(entry, _refusal(error, entry.routing_key))
        await message.ack()
        return Replayed(entry)


def _refusal(error: DeliveryError, routing_key: str) -> str:
    if isinstance(error, PublishError):
        return f"the broker returned it: no queue is bound for routing key {routing_key}"
    return f"the broker did not confirm it ({type(error).__name__})"
