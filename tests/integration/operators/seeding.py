"""Putting messages where the worker and the broker would: dead letters, audit events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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
    utc_now,
)
from harness.broker import publish_raw, queue_depth
from harness.waiting import eventually
from harness.world import World
from worker.adapters.broker import ERROR_HEADER, FAILED_AT_HEADER

__all__ = [
    "broker_dead_letter",
    "clock_passes",
    "memory_updated",
    "publish_event",
    "revision_row",
    "tool_call",
    "worker_dead_letter",
]


async def clock_passes(moment: datetime) -> None:
    """Returns once the clock is past `moment`: events published next occurred after it."""

    async def passed() -> bool:
        return utc_now() > moment

    await eventually(passed, what=f"the clock to pass {moment}")


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


def memory_updated(
    tool_call_id: str, memory_id: int, revision_id: int | None = None
) -> MemoryUpdated:
    """The audit event of a change; its texts are those of revision `revision_id` (by default
    one that does not exist)."""
    return MemoryUpdated(
        tool_call_id=tool_call_id,
        revision_id=memory_id * 10 if revision_id is None else revision_id,
        scope="server_wide",
        memory_id=memory_id,
        guild_id="1001",
        channel_id="2002",
        owner_id=None,
        actor_id="3003",
        persona_id=1,
        persona_lineage_id=1,
    )


async def revision_row(
    world: World, tool_call_id: str, memory_id: int, before: str, after: str | None
) -> int:
    """A revision of a server memory, as the worker writes one: its id."""
    [row] = await world.execute(
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before, content_after,"
        " server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
        " VALUES ('server_wide', %s, 'updated', %s, %s, NULL, 1, '3003', %s)"
        " RETURNING revision_id",
        memory_id,
        before,
        after,
        tool_call_id,
    )
    return int(row["revision_id"])


async def _publish(
    channel: AbstractChannel,
    exchange: str,
    event: Event,
    routing_key: str,
    **extra_headers: Any,
) -> None:
    properties = amqp_properties(event)
    properties["headers"] = {**properties["headers"], **extra_headers}
    await publish_raw(channel, exchange, encode_event(event), routing_key, **properties)


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
    failed_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    await _publish(
        channel,
        topology.dead_letter_exchange,
        event,
        routing_key,
        **{
            "x-delivery-count": delivery_count,
            ERROR_HEADER: reason,
            FAILED_AT_HEADER: failed_at,
        },
    )


async def broker_dead_letter(channel: AbstractChannel, topology: Topology, event: Event) -> None:
    """Publishes a call to the work queue and rejects it (requeue) until the quorum queue's
    delivery limit dead-letters it."""
    before = await queue_depth(channel, topology.dead_letter_queue)
    await _publish(channel, topology.tool_calls_exchange, event, UPDATE_LONG_TERM_MEMORY)
    work = await channel.declare_queue(topology.worker_queue, passive=True)

    async def dead_lettered() -> bool:
        await _reject_one(work)
        return await queue_depth(channel, topology.dead_letter_queue) > before

    await eventually(dead_lettered, timeout=30, what="the broker to dead-letter at the limit")


async def _reject_one(work: AbstractQueue) -> None:
    delivery = await work.get(no_ack=False, fail=False)
    if delivery is not None:
        await delivery.reject(requeue=True)


async def publish_event(channel: AbstractChannel, topology: Topology, event: Event) -> None:
    await _publish(
        channel, topology.events_exchange, event, audit_routing_key("updated", "server_wide")
    )
