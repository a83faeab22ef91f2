"""`gateway.data_rights`: a user's export or erasure published as `data_request.requested`
and answered by the `data_request.completed` routed to its shard; a server's erasure asked
for when the bot is removed from a guild (`LTM_FORGET_SERVER_ON_REMOVAL`). The test answers
in the worker's place."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import aio_pika
import hikari
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    ExportDocument,
    Receipt,
    Topology,
    decode_event,
    result_routing_key,
)
from gateway import ToolClientUnavailable
from harness.snowflake import snowflake
from tests.integration.gateway.conftest import GatewayFactory, fresh_shard, publish
from tests.integration.gateway.test_tool_client import context


@pytest.fixture
async def data_requests(
    channel: AbstractChannel, topology: Topology
) -> AsyncIterator[AbstractQueue]:
    """A queue of our own, bound like the worker's, to see the requests published."""
    exchange = await channel.declare_exchange(
        topology.tool_calls_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    queue = await channel.declare_queue(exclusive=True, auto_delete=True)
    await queue.bind(exchange, routing_key=DATA_REQUEST_ROUTING_KEY)
    yield queue
    await queue.delete(if_unused=False, if_empty=False)


async def _next_request(
    queue: AbstractQueue, requested_by: str
) -> tuple[DataRequestRequested, AbstractIncomingMessage]:
    async with queue.iterator() as messages:
        async for message in messages:
            await message.ack()
            event = decode_event(message.body)
            if isinstance(event, DataRequestRequested) and event.requested_by.id == requested_by:
                return event, message
    raise AssertionError("the queue ended")


def _answer(request: DataRequestRequested, **fields: object) -> DataRequestCompleted:
    return DataRequestCompleted.model_validate(
        {
            "request_id": request.request_id,
            "kind": request.kind,
            "subject": request.subject,
            "requested_by": request.requested_by,
            "status": "done",
            **fields,
        }
    )


async def test_an_export_is_published_and_answered_with_its_document(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    data_requests: AbstractQueue,
) -> None:
    shard = fresh_shard()
    where = context(shard)
    user = str(where.triggerer_id)
    async with start_gateway(shards=(shard,)) as gateway:
        export = asyncio.create_task(gateway.data_rights.export(user, where, timeout_s=10))
        request, message = await asyncio.wait_for(_next_request(data_requests, user), 10)
        assert (request.kind, request.subject.user_id, request.requested_by.kind) == (
            "export",
            user,
            "user",
        )
        assert request.context is not None
        assert (request.context.shard_id, request.context.channel_id) == (
            shard,
            str(where.channel_id),
        )
        assert message.correlation_id == request.request_id
        assert message.user_id == gateway.tool_client.user_id
        answer = _answer(request, document=ExportDocument(user=None))
        await publish(channel, topology, answer, result_routing_key(shard))
        assert await export == answer


async def test_a_forget_me_carries_its_options_and_returns_the_receipt(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    data_requests: AbstractQueue,
) -> None:
    shard = fresh_shard()
    where = context(shard)
    user = str(where.triggerer_id)
    async with start_gateway(shards=(shard,)) as gateway:
        forget = asyncio.create_task(
            gateway.data_rights.forget(user, where, strict=True, keep_learning=True, timeout_s=10)
        )
        request, _ = await asyncio.wait_for(_next_request(data_requests, user), 10)
        assert (request.kind, request.strict, request.keep_learning) == ("erase", True, True)
        answer = _answer(request, receipt=Receipt(memories_deleted=3))
        await publish(channel, topology, answer, result_routing_key(shard))
        completed = await forget
    assert completed.receipt == Receipt(memories_deleted=3)


async def test_no_answer_in_time_raises_timeout_and_another_shard_is_unavailable(
    start_gateway: GatewayFactory, data_requests: AbstractQueue
) -> None:
    shard = fresh_shard()
    async with start_gateway(shards=(shard,)) as gateway:
        with pytest.raises(TimeoutError):
            await gateway.data_rights.export(snowflake(), context(shard), timeout_s=0.5)
        with pytest.raises(ToolClientUnavailable):
            await gateway.data_rights.export(snowflake(), context(fresh_shard()), timeout_s=0.5)


async def test_a_guild_leave_asks_for_the_servers_erasure_as_bot_removed(
    start_gateway: GatewayFactory, data_requests: AbstractQueue
) -> None:
    shard = fresh_shard()
    guild = snowflake()
    instance = f"removed-{guild}"
    async with start_gateway(shards=(shard,), instance=instance) as gateway:
        leave = hikari.GuildLeaveEvent(
            app=cast(hikari.RESTAware, None),
            shard=cast(hikari.api.GatewayShard, None),
            guild_id=hikari.Snowflake(guild),
            old_guild=None,
        )
        await gateway.on_guild_leave(leave)
        request, _ = await asyncio.wait_for(_next_request(data_requests, instance), 10)
    assert request.kind == "erase"
    assert request.subject.guild_id == str(guild)
    assert request.requested_by.kind == "bot_removed"
    assert request.context is None
