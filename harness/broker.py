"""Talking to the real broker in tests: publishing tool calls, and taps on what comes out."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from contracts import Event, Topology, amqp_properties, decode_event, encode_event
from harness.waiting import eventually
from infra.messaging.topology import declare_topology
from infra.settings import Settings

__all__ = [
    "Delivery",
    "EventTap",
    "delete_topology",
    "own_topology",
    "publish_raw",
    "publish_tool_call",
    "queue_depth",
    "queue_events",
    "tap_events",
]


@dataclass(frozen=True)
class Delivery:
    event: Event | None  # None when the body is not an event of the contract
    routing_key: str
    body: bytes
    headers: dict[str, Any]
    properties: dict[str, Any]


@dataclass
class EventTap:
    """Every message routed to the tap's queue, in arrival order."""

    deliveries: list[Delivery] = field(default_factory=list)

    def events(self, kind: type[Event] | None = None, **match: Any) -> list[Any]:
        found = []
        for delivery in self.deliveries:
            event = delivery.event
            if event is None or (kind is not None and not isinstance(event, kind)):
                continue
            if all(getattr(event, key, None) == value for key, value in match.items()):
                found.append(event)
        return found

    async def wait_for(
        self,
        kind: type[Event],
        count: int = 1,
        *,
        timeout: float = 20.0,
        **match: Any,
    ) -> list[Any]:
        async def enough() -> list[Any] | None:
            found = self.events(kind, **match)
            return found if len(found) >= count else None

        return await eventually(enough, timeout=timeout, what=f"{count} {kind.__name__} {match}")

    def deliveries_with(self, **properties: Any) -> list[Delivery]:
        """The deliveries whose AMQP properties (message_id, correlation_id, ...) match."""
        return [
            delivery
            for delivery in self.deliveries
            if all(delivery.properties.get(key) == value for key, value in properties.items())
        ]

    async def wait_for_delivery(
        self, *, timeout: float = 20.0, **properties: Any
    ) -> list[Delivery]:
        """Until at least one delivery matches `properties`; returns those that do."""

        async def found() -> list[Delivery] | None:
            return self.deliveries_with(**properties) or None

        return await eventually(found, timeout=timeout, what=f"a delivery with {properties}")

    async def wait_until(
        self, predicate: Callable[[EventTap], bool], *, timeout: float = 20.0, what: str = ""
    ) -> None:
        async def holds() -> bool:
            return predicate(self)

        await eventually(holds, timeout=timeout, what=what or "tap condition")


def _delivery(message: AbstractIncomingMessage) -> Delivery:
    try:
        event: Event | None = decode_event(message.body)
    except ValueError:
        event = None
    return Delivery(
        event=event,
        routing_key=message.routing_key or "",
        body=message.body,
        headers=dict(message.headers or {}),
        properties={
            "message_id": message.message_id,
            "correlation_id": message.correlation_id,
            "type": message.type,
            "content_type": message.content_type,
            "delivery_mode": message.delivery_mode,
            "expiration": message.expiration,
            "timestamp": message.timestamp,
            "user_id": message.user_id,
        },
    )


@asynccontextmanager
async def tap_events(
    channel: AbstractChannel,
    exchange: str,
    routing_keys: Sequence[str] = ("#",),
) -> AsyncIterator[EventTap]:
    """A private queue bound to `exchange`, consumed into an `EventTap` while the block runs.

    A copy of what was routed: it holds events that other queues of the same routing refused
    (`queue_events` shows what one of them holds)."""
    queue = await channel.declare_queue(
        f"test-tap-{uuid.uuid4().hex[:12]}", exclusive=True, auto_delete=True
    )
    target = await channel.get_exchange(exchange, ensure=False)
    for key in routing_keys:
        await queue.bind(target, routing_key=key)
    try:
        async with queue_events(queue) as tap:
            yield tap
    finally:
        await queue.delete(if_unused=False, if_empty=False)


@asynccontextmanager
async def queue_events(queue: AbstractQueue) -> AsyncIterator[EventTap]:
    """`queue`'s messages, consumed (and acked) into an `EventTap` while the block runs: what
    a consumer of that queue, such as a gateway of a shard, would get."""
    tap = EventTap()

    async def collect(message: AbstractIncomingMessage) -> None:
        tap.deliveries.append(_delivery(message))
        await message.ack()

    tag = await queue.consume(collect)
    try:
        yield tap
    finally:
        await queue.cancel(tag)


async def publish_tool_call(channel: AbstractChannel, topology: Topology, call: Event) -> None:
    exchange = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
    await exchange.publish(
        aio_pika.Message(encode_event(call), **amqp_properties(call)),
        routing_key=str(getattr(call, "tool_name", "update_long_term_memory")),
    )


async def publish_raw(
    channel: AbstractChannel,
    exchange_name: str,
    body: bytes,
    routing_key: str,
    **properties: Any,
) -> None:
    exchange = await channel.get_exchange(exchange_name, ensure=False)
    properties.setdefault("message_id", str(uuid.uuid4()))
    properties.setdefault("delivery_mode", aio_pika.DeliveryMode.PERSISTENT)
    await exchange.publish(aio_pika.Message(body, **properties), routing_key=routing_key)


async def queue_depth(channel: AbstractChannel, name: str) -> int:
    queue = await channel.declare_queue(name, passive=True)
    return int(queue.declaration_result.message_count or 0)


@asynccontextmanager
async def own_topology(
    settings: Settings, label: str, *, publisher_confirms: bool = False
) -> AsyncIterator[tuple[Settings, Topology, AbstractChannel]]:
    """The topology under a sub-prefix of the run's, declared, then deleted after the block.

    Its work queue, dead-letter queue and audit stream hold only what the caller's tests and
    workers (given the settings yielded) put there. Yields those settings, the topology, and a
    channel on a connection of its own.
    """
    own = settings.model_copy(
        update={"amqp_prefix": f"{settings.amqp_prefix}-{label}{uuid.uuid4().hex[:8]}"}
    )
    topology = Topology(own.amqp_prefix)
    async with await aio_pika.connect(own.amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=publisher_confirms)
        await declare_topology(channel, topology)
        yield own, topology, channel
        await delete_topology(channel, topology)


async def delete_topology(channel: AbstractChannel, topology: Topology) -> None:
    """What `declare_topology` made, shard queues aside."""
    for queue in (topology.worker_queue, topology.dead_letter_queue, topology.audit_stream):
        await channel.queue_delete(queue)
    for exchange in (
        topology.tool_calls_exchange,
        topology.dead_letter_exchange,
        topology.events_exchange,
    ):
        await channel.exchange_delete(exchange)
