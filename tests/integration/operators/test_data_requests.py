"""`operators.data_requests.request_data`, the use case the console's Data requests page and
the operators' commands share: published to the worker's queue, answered on a private copy
of the shard's results. The test answers in the worker's place."""

from __future__ import annotations

import asyncio

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    Receipt,
    Subject,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from harness.snowflake import snowflake
from infra.settings import Settings
from operators.data_requests import ANSWER_SHARD, operator_request, request_data
from operators.tool_call import Unroutable


async def _answer_once(channel: AbstractChannel, topology: Topology) -> AbstractIncomingMessage:
    """Takes the next data request from the worker's queue and answers it as done."""
    work = await channel.declare_queue(topology.worker_queue, passive=True)
    events = await channel.get_exchange(topology.events_exchange, ensure=False)
    async with work.iterator() as messages:
        async for message in messages:
            await message.ack()
            request = decode_event(message.body)
            assert isinstance(request, DataRequestRequested) and request.context is not None
            answer = DataRequestCompleted(
                request_id=request.request_id,
                kind=request.kind,
                subject=request.subject,
                requested_by=request.requested_by,
                status="done",
                receipt=Receipt(memories_deleted=1),
            )
            await events.publish(
                aio_pika.Message(encode_event(answer), **amqp_properties(answer)),
                routing_key=result_routing_key(request.context.shard_id),
            )
            return message
    raise AssertionError("the queue ended")


async def test_an_operators_erasure_is_published_to_the_worker_and_answered(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    user = snowflake()
    request = operator_request("erase", Subject(user_id=user), "console:ann", strict=True)
    answering = asyncio.create_task(_answer_once(channel, topology))
    completed = await request_data(ops_settings, request, timeout=10)
    message = await answering
    assert message.routing_key == DATA_REQUEST_ROUTING_KEY
    assert message.correlation_id == request.request_id
    published = decode_event(message.body)
    assert isinstance(published, DataRequestRequested)
    assert published.requested_by.model_dump() == {"kind": "operator", "id": "console:ann"}
    assert published.strict is True
    assert published.context is not None and published.context.shard_id == ANSWER_SHARD
    assert completed.request_id == request.request_id
    assert completed.receipt == Receipt(memories_deleted=1)


async def test_no_answer_in_time_raises_timeout(ops_settings: Settings) -> None:
    request = operator_request("export", Subject(user_id=snowflake()), "cli:root")
    with pytest.raises(TimeoutError):
        await request_data(ops_settings, request, timeout=0.5)


async def test_a_request_no_queue_takes_is_unroutable(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    work = await channel.declare_queue(topology.worker_queue, passive=True)
    await work.unbind(topology.tool_calls_exchange, routing_key=DATA_REQUEST_ROUTING_KEY)
    request = operator_request("export", Subject(user_id=snowflake()), "cli:root")
    with pytest.raises(Unroutable):
        await request_data(ops_settings, request, timeout=5)


async def test_a_request_without_a_context_is_refused_before_publishing(
    ops_settings: Settings,
) -> None:
    request = operator_request("export", Subject(user_id=snowflake()), "cli:root")
    with pytest.raises(ValueError, match="never answered"):
        await request_data(ops_settings, request.model_copy(update={"context": None}))
