"""The tool client publishes `tool_call.requested` and returns the result routed to its shard."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    Participant,
    ToolCallRequested,
    Topology,
    decode_tool_call,
)
from gateway import TIMEOUT_STATUS, UNAVAILABLE_STATUS, Gateway, MessageContext
from harness.amqp_proxy import AmqpProxy
from harness.snowflake import snowflake
from harness.waiting import eventually
from infra.settings import Settings
from tests.integration.gateway.conftest import (
    GatewayFactory,
    fresh_shard,
    handled,
    publish_result,
    tool_call_completed,
)


@pytest.fixture
async def requests_queue(
    channel: AbstractChannel, topology: Topology
) -> AsyncIterator[AbstractQueue]:
    """A queue of our own, bound like the worker's, to see what the tool client publishes."""
    exchange = await channel.declare_exchange(
        topology.tool_calls_exchange, aio_pika.ExchangeType.TOPIC, durable=True
    )
    queue = await channel.declare_queue(exclusive=True, auto_delete=True)
    await queue.bind(exchange, routing_key=UPDATE_LONG_TERM_MEMORY)
    yield queue
    await queue.delete(if_unused=False, if_empty=False)


def context(shard: int) -> MessageContext:
    alice = snowflake()
    return MessageContext(
        guild_id=snowflake(),
        channel_id=snowflake(),
        triggerer_id=alice,
        bot_user_id=snowflake(),
        persona_id=7,
        shard_id=shard,
        participants=(
            Participant(user_id=str(alice), display_label="Alice (@alice)", aliases=("Alice",)),
        ),
    )


async def next_request(queue: AbstractQueue, tool_call_id: str) -> AbstractIncomingMessage:
    """The published request of this tool call (others' requests are skipped)."""
    async with queue.iterator() as messages:
        async for message in messages:
            await message.ack()
            if message.correlation_id == tool_call_id:
                return message
    raise AssertionError("the queue ended")


async def start_call(
    gateway: Gateway,
    requests_queue: AbstractQueue,
    tool_call_id: str,
    message_context: MessageContext,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    timeout_s: float = 10,
) -> tuple[asyncio.Task[dict[str, Any]], AbstractIncomingMessage]:
    """A call under way, once its request is published: the task it runs in, and the request."""
    call = asyncio.create_task(
        gateway.tool_client.call(
            tool_call_id,
            UPDATE_LONG_TERM_MEMORY,
            {} if arguments is None else arguments,
            message_context,
            timeout_s=timeout_s,
        )
    )
    message = await asyncio.wait_for(next_request(requests_queue, tool_call_id), 10)
    return call, message


async def test_a_call_is_published_and_answered_with_its_result(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    requests_queue: AbstractQueue,
) -> None:
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    message_context = context(shard)
    async with start_gateway(shards=(shard,)) as gateway:
        call, message = await start_call(
            gateway,
            requests_queue,
            tool_call_id,
            message_context,
            '{"action": "update", "scope": "server_wide", "content": "Alice likes tea"}',
        )
        request = decode_tool_call(message.body)
        completed = tool_call_completed(tool_call_id, shard, request.context.channel_id)
        await publish_result(channel, topology, completed)
        answer = await asyncio.wait_for(call, 10)

    assert answer == completed.for_llm()
    assert answer["status"] == "memory_updated_successfully"
    # The request: the contract's properties and fields.
    assert message.routing_key == UPDATE_LONG_TERM_MEMORY
    assert message.message_id == str(request.event_id)
    assert message.correlation_id == tool_call_id
    assert message.type == "tool_call.requested"
    assert message.content_type == "application/json"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert message.headers["schema_version"] == 1
    # The connection's broker user: the broker vouches for it, the worker may check it.
    assert message.user_id == "guest"
    assert request.tool_name == UPDATE_LONG_TERM_MEMORY
    assert request.arguments == {
        "action": "update",
        "scope": "server_wide",
        "content": "Alice likes tea",
    }
    assert request.context.guild_id == str(message_context.guild_id)
    assert request.context.channel_id == str(message_context.channel_id)
    assert request.context.triggerer_id == str(message_context.triggerer_id)
    assert request.context.bot_user_id == str(message_context.bot_user_id)
    assert request.context.persona_id == 7
    assert request.context.shard_id == shard
    assert request.context.participants == tuple(message_context.participants)
    assert json.loads(message.body)["context"]["guild_id"] == str(message_context.guild_id)


async def test_arguments_given_as_a_dict_travel_unchanged(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    requests_queue: AbstractQueue,
) -> None:
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    arguments = {"action": "delete", "memory_id": 12, "scope": "target_user"}
    async with start_gateway(shards=(shard,)) as gateway:
        call, message = await start_call(
            gateway, requests_queue, tool_call_id, context(shard), arguments
        )
        await publish_result(channel, topology, tool_call_completed(tool_call_id, shard))
        await asyncio.wait_for(call, 10)
    assert ToolCallRequested.model_validate_json(message.body).arguments == arguments


async def test_no_answer_in_time_gives_the_llm_a_clear_timeout(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    requests_queue: AbstractQueue,
) -> None:
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    async with start_gateway(shards=(shard,)) as gateway:
        answer = await gateway.tool_client.call(
            tool_call_id, UPDATE_LONG_TERM_MEMORY, {}, context(shard), timeout_s=0.3
        )
        assert answer["success"] is False
        assert answer["status"] == TIMEOUT_STATUS
        assert "did not answer" in answer["message"]
        assert gateway.tool_client.pending == 0
        # The late result is acknowledged and dropped, not an error.
        late = tool_call_completed(tool_call_id, shard)
        await publish_result(channel, topology, late)
        await handled(gateway, late, what="late result")


async def test_a_call_for_a_shard_this_process_does_not_consume_is_refused(
    start_gateway: GatewayFactory,
) -> None:
    shard = fresh_shard()
    async with start_gateway(shards=(shard,)) as gateway:
        answer = await gateway.tool_client.call(
            "call_elsewhere", UPDATE_LONG_TERM_MEMORY, {}, context(shard + 1), timeout_s=1
        )
    assert answer["status"] == UNAVAILABLE_STATUS
    assert answer["success"] is False


async def test_calls_waiting_when_the_gateway_stops_are_answered(
    start_gateway: GatewayFactory,
    requests_queue: AbstractQueue,
) -> None:
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    async with start_gateway(shards=(shard,)) as gateway:
        call, _ = await start_call(
            gateway, requests_queue, tool_call_id, context(shard), timeout_s=30
        )
    answer = await asyncio.wait_for(call, 5)
    assert answer["status"] == UNAVAILABLE_STATUS


async def test_a_call_made_before_the_shards_are_known_is_answered_once_they_are(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    requests_queue: AbstractQueue,
) -> None:
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    async with start_gateway(shards=()) as gateway:  # a bot whose shards are not up yet
        assert gateway.tool_client.shards is None
        call, _ = await start_call(gateway, requests_queue, tool_call_id, context(shard))
        await gateway.consume_shards((shard,))
        assert gateway.tool_client.shards == {shard}
        completed = tool_call_completed(tool_call_id, shard)
        await publish_result(channel, topology, completed)
        answer = await asyncio.wait_for(call, 10)
    assert answer == completed.for_llm()


async def _refusing_queue(channel: AbstractChannel, topology: Topology) -> AbstractQueue:
    """A second queue the calls are routed to, which takes none: the broker nacks each call
    until it is gone (as RabbitMQ 3.10 nacks a channel that met a quorum queue's election)."""
    exchange = await channel.get_exchange(topology.tool_calls_exchange)
    refusing = await channel.declare_queue(
        exclusive=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
    )
    await refusing.bind(exchange, routing_key=UPDATE_LONG_TERM_MEMORY)
    return refusing


async def test_a_call_the_broker_refuses_goes_again_on_a_new_channel_and_is_answered(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    requests_queue: AbstractQueue,
) -> None:
    refusing = await _refusing_queue(channel, topology)
    shard = fresh_shard()
    tool_call_id = f"call_{snowflake()}"
    async with start_gateway(shards=(shard,)) as gateway:
        publishing = gateway.tool_client.publishing
        first = publishing.channel
        call = asyncio.create_task(
            gateway.tool_client.call(
                tool_call_id, UPDATE_LONG_TERM_MEMORY, {}, context(shard), timeout_s=30
            )
        )

        async def renewed() -> bool:
            return publishing.renewals >= 1

        await eventually(renewed, timeout=10, what="a new channel after the nack")
        assert publishing.channel is not first
        await refusing.delete(if_unused=False, if_empty=False)

        message = await asyncio.wait_for(next_request(requests_queue, tool_call_id), 10)
        request = decode_tool_call(message.body)
        completed = tool_call_completed(tool_call_id, shard, request.context.channel_id)
        await publish_result(channel, topology, completed)
        answer = await asyncio.wait_for(call, 10)
    assert answer == completed.for_llm()


async def test_a_call_the_broker_keeps_refusing_is_answered_unavailable(
    start_gateway: GatewayFactory, channel: AbstractChannel, topology: Topology
) -> None:
    refusing = await _refusing_queue(channel, topology)
    shard = fresh_shard()
    async with start_gateway(shards=(shard,)) as gateway:
        answer = await gateway.tool_client.call(
            f"call_{snowflake()}", UPDATE_LONG_TERM_MEMORY, {}, context(shard), timeout_s=2
        )
        renewals = gateway.tool_client.publishing.renewals
    await refusing.delete(if_unused=False, if_empty=False)
    assert answer["status"] == UNAVAILABLE_STATUS
    assert "refused" in answer["message"]
    assert renewals >= 2  # sent again on each new channel until the call's time ran out


async def test_a_call_over_a_stalled_broker_connection_is_answered_unavailable(
    start_gateway: GatewayFactory, settings: Settings
) -> None:
    # aiormq gives up the stalled connection by failing the call's confirm with CancelledError:
    # the bot's turn gets an answer, not a cancellation it never asked for.
    shard = fresh_shard()
    async with AmqpProxy(settings.amqp_url) as proxy:
        connection = await aio_pika.connect_robust(proxy.url(heartbeat_s=1))
        try:
            async with start_gateway(shards=(shard,), connection=connection) as gateway:
                proxy.stall()
                answer = await gateway.tool_client.call(
                    "call_stalled",
                    UPDATE_LONG_TERM_MEMORY,
                    {"memory_id": 1, "memory_content": "stalled"},
                    context(shard),
                    timeout_s=30,
                )
                proxy.resume()
        finally:
            proxy.resume()
            await connection.close()
    assert answer["status"] == UNAVAILABLE_STATUS
    assert "stalled" in answer["message"]
