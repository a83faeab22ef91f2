"""Putting messages where the worker and the broker would: dead letters, audit events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractQueue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    Event,
    MemoryUpdated,
    ToolCallContext,
    ToolCallRequested,
    Topology,
    amqp_properties,
    audit_routing_key,
    encode_event,
)
from tests.support.waiting import eventually

__all__ = [
    "broker_dead_letter",
    "memory_updated",
    "message_count",
    "publish_event",
    "tool_call",
    "worker_dead_letter",
]


def tool_call(tool_call_id: str) -> ToolCallRequested:
    return ToolCallRequested(
        tool_call_id=tool_call_id,
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments={"memory_id": 7, "memory_content": "likes tea"},
        context=ToolCallContext(
            guild_id="1001",
            channel_id="2002",
            triggerer_id="3003",
            bot_user_id="4004",
            persona_id=1,
            shard_id=0,
        ),
    )


def memory_updated(tool_call_id: str, memory_id: int, before: str, after: str) -> MemoryUpdated:
    return MemoryUpdated(
        tool_call_id=tool_call_id,
        revision_id=memory_id * 10,
        scope="server_wide",
        memory_id=memory_id,
        guild_id="1001",
        channel_id="2002",
        owner_id=None,
        actor_id="3003",
        persona_id=1,
        persona_lineage_id=1,
        content_before=before,
        content_after=after,
    )


def _message(event: Event, **extra_headers: Any) -> aio_pika.Message:
    properties = amqp_properties(event)
    properties["headers"] = {**properties["headers"], **extra_headers}
    return aio_pika.Message(encode_event(event), **properties)


async def message_count(channel: AbstractChannel, queue_name: str) -> int:
    queue = await channel.declare_queue(queue_name, passive=True)
    return int(queue.declaration_result.message_count or 0)


async def worker_dead_letter(
    channel: AbstractChannel,
    topology: Topology,
    event: Event,
    reason: str,
    *,
    routing_key: str = UPDATE_LONG_TERM_MEMORY,
    delivery_count: int = 2,
) -> None:
    """As the worker does: the delivery as it came (with the work queue's delivery count),
    plus why and when, to the dead-letter exchange."""
    exchange = await channel.get_exchange(topology.dead_letter_exchange)
    failed_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    message = _message(
        event,
        **{
            "x-delivery-count": delivery_count,
            "x-ltm-error": reason,
            "x-ltm-failed-at": failed_at,
        },
    )
    await exchange.publish(message, routing_key=routing_key)


async def broker_dead_letter(channel: AbstractChannel, topology: Topology, event: Event) -> None:
    """Publishes a call to the work queue and rejects it (requeue) until the quorum queue's
    delivery limit dead-letters it."""
    before = await message_count(channel, topology.dead_letter_queue)
    exchange = await channel.get_exchange(topology.tool_calls_exchange)
    await exchange.publish(_message(event), routing_key=UPDATE_LONG_TERM_MEMORY)
    work = await channel.declare_queue(topology.worker_queue, passive=True)

    async def dead_lettered() -> bool:
        await _reject_one(work)
        return await message_count(channel, topology.dead_letter_queue) > before

    await eventually(dead_lettered, timeout=30, what="the broker to dead-letter at the limit")


async def _reject_one(work: AbstractQueue) -> None:
    delivery = await work.get(no_ack=False, fail=False)
    if delivery is not None:
        await delivery.reject(requeue=True)


async def publish_event(channel: AbstractChannel, topology: Topology, event: Event) -> None:
    exchange = await channel.get_exchange(topology.events_exchange)
    await exchange.publish(_message(event), routing_key=audit_routing_key("updated", "server_wide"))
