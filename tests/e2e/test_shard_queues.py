"""Replies for a shard whose queue nobody declared: the worker declares it, so they wait there.

A bot whose shard count differs from `LTM_SHARD_COUNT` (or a shard added later) must not lose
its results and embeds to an exchange with no queue bound for them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from contracts import (
    EmbedRequested,
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    Topology,
    decode_event,
    encode_event,
    result_routing_key,
)
from harness.broker import publish_tool_call
from harness.processes import LtmProcess
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import World, participant, tool_call

pytestmark = pytest.mark.usefixtures("worker_process")

# Shards of this module's own, beyond the worker's LTM_SHARD_COUNT (1): no queue until a reply.
CALL_SHARD = 5_005
SWEPT_SHARD = 5_006


# Plain channels, not robust ones: a robust channel answers a passive declare it made before
# from memory (a stale message count), and reopens a channel the broker closed.


@pytest.fixture
async def probe(amqp: AbstractRobustConnection) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    channel = await aio_pika.Channel(amqp)
    yield channel
    if not channel.is_closed:
        await channel.close()


async def _exists(amqp: AbstractRobustConnection, queue: str) -> bool:
    """A channel of its own: a passive declare of a missing queue closes it."""
    channel = await aio_pika.Channel(amqp)
    try:
        await channel.declare_queue(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    await channel.close()
    return True


async def _take(channel: aio_pika.abc.AbstractChannel, queue: str) -> list[Any]:
    """Every message waiting in `queue`, decoded; taken off it."""
    declared = await channel.declare_queue(queue, passive=True)
    events: list[Any] = []
    while True:
        message: AbstractIncomingMessage | None = await declared.get(fail=False)
        if message is None:
            return events
        events.append(decode_event(message.body))
        await message.ack()


async def _depth(channel: aio_pika.abc.AbstractChannel, queue: str) -> int:
    declared = await channel.declare_queue(queue, passive=True)
    return int(declared.declaration_result.message_count or 0)


def _warnings_about(worker: LtmProcess, shard_id: int) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in worker.output().splitlines() if line.startswith("{")]
    return [
        line for line in lines if line.get("shard_id") == shard_id and line["level"] == "warning"
    ]


async def test_a_call_from_a_shard_without_a_queue_leaves_its_replies_waiting_there(
    amqp: AbstractRobustConnection,
    channel: aio_pika.abc.AbstractChannel,
    probe: aio_pika.abc.AbstractChannel,
    topology: Topology,
    world: World,
    worker_process: LtmProcess,
) -> None:
    queue = topology.shard_queue(CALL_SHARD)
    assert not await _exists(amqp, queue)
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    triggerer = snowflake()
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "likes green tea"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"),),
        shard_id=CALL_SHARD,
    )

    await publish_tool_call(channel, topology, call)

    async def both_waiting() -> bool:
        return await _exists(amqp, queue) and await _depth(probe, queue) >= 2

    await eventually(both_waiting, what=f"the result and the embed waiting in {queue}")
    waiting = await _take(probe, queue)
    assert {type(event) for event in waiting} == {ToolCallCompleted, EmbedRequested}
    assert {event.tool_call_id for event in waiting} == {call.tool_call_id}
    [result] = [event for event in waiting if isinstance(event, ToolCallCompleted)]
    assert result.status is MemoryStatus.UPDATED
    # Beyond LTM_SHARD_COUNT: said once, naming the call that brought it.
    [warning] = _warnings_about(worker_process, CALL_SHARD)
    assert warning["tool_call_id"] == call.tool_call_id
    assert warning["event"] == "worker.shard_beyond_shard_count"
    assert warning["setting"] == "LTM_SHARD_COUNT"
    assert warning["queue"] == queue


async def test_the_outbox_sweep_declares_the_queue_of_the_shard_it_publishes_to(
    amqp: AbstractRobustConnection,
    probe: aio_pika.abc.AbstractChannel,
    topology: Topology,
    world: World,
) -> None:
    # A row a crashed worker committed and never published: the sweep of a worker that never
    # saw this shard sends it.
    queue = topology.shard_queue(SWEPT_SHARD)
    assert not await _exists(amqp, queue)
    result = ToolCallCompleted(
        tool_call_id=f"call-{uuid.uuid4()}",
        tool_name="update_long_term_memory",
        guild_id=snowflake(),
        channel_id=snowflake(),
        shard_id=SWEPT_SHARD,
        success=True,
        status=MemoryStatus.UPDATED,
        message="Saved.",
        data=ResultData(scope="server_wide", memory_id=1, content_saved="likes tea"),
    )
    await world.execute(
        "INSERT INTO outbox (event_id, event_type, routing_key, correlation_id, body, ttl_ms,"
        " created_at) VALUES (%s, %s, %s, %s, %s, 900000, now() - interval '1 minute')",
        result.event_id,
        result.event_type,
        result_routing_key(SWEPT_SHARD),
        result.tool_call_id,
        encode_event(result),
    )

    async def waiting() -> bool:
        return await _exists(amqp, queue) and await _depth(probe, queue) >= 1

    await eventually(waiting, timeout=30, what=f"the swept result waiting in {queue}")
    [swept] = await _take(probe, queue)
    assert swept.event_id == result.event_id
