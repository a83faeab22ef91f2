"""Real messages against the AsyncAPI document: what a bot publishes, everything the worker
emits and dead-letters, each checked against its message's payload and header schemas."""

from __future__ import annotations

import uuid

import orjson
import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    MemoryDeleted,
    MemoryUpdated,
    ToolCallCompleted,
    Topology,
    amqp_properties,
    encode_event,
)
from contracts.envelope import ENVELOPE_FIELDS
from gateway.tool_client import MessageContext, ToolClient
from harness.broker import EventTap, publish_raw, publish_tool_call, tap_events
from harness.snowflake import snowflake
from harness.world import World, participant
from tests.support.asyncapi import AsyncApiDocument

pytestmark = pytest.mark.usefixtures("worker_process")


def _context(guild_id: str, persona_id: int) -> MessageContext:
    return MessageContext(guild_id, snowflake(), snowflake(), snowflake(), persona_id, 0)


@pytest.fixture(scope="module")
def document() -> AsyncApiDocument:
    return AsyncApiDocument.load()


def _check_every_delivery(tap: EventTap, document: AsyncApiDocument, tool_call_id: str) -> int:
    checked = 0
    for delivery in tap.deliveries_with(correlation_id=tool_call_id):
        message = document.message_name(str(delivery.properties["type"]))
        assert document.errors(message, delivery.body, delivery.headers) == [], (
            message,
            delivery.body,
        )
        checked += 1
    return checked


@pytest.mark.parametrize("content", ["likes green tea", ""], ids=["update", "delete"])
async def test_a_bot_call_and_everything_it_causes_match_the_document(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    document: AsyncApiDocument,
    content: str,
) -> None:
    server = await world.server()
    persona = await world.persona(server, nickname="Tomori")
    memory_id = await world.server_memory(persona, "likes tea")
    triggerer = snowflake()
    # Built as the gateway builds it for a bot.
    call = ToolClient.build_request(
        f"wire-{uuid.uuid4()}",
        "update_long_term_memory",
        orjson.dumps({"memory_id": memory_id, "memory_content": content}).decode(),
        MessageContext(
            guild_id=int(server.disc_id),
            channel_id=int(snowflake()),
            triggerer_id=int(triggerer),
            bot_user_id=int(snowflake()),
            persona_id=persona.persona_id,
            shard_id=0,
            participants=(participant(triggerer, "Bob"),),
        ),
    )
    assert document.errors("ToolCallRequested", encode_event(call), {"schema_version": 1}) == []
    audit = MemoryDeleted if content == "" else MemoryUpdated
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        for kind in (ToolCallCompleted, EmbedRequested, CacheInvalidate, audit):
            await tap.wait_for(kind, tool_call_id=call.tool_call_id)
    assert _check_every_delivery(tap, document, call.tool_call_id) == 4


async def test_a_failure_result_matches_the_document(
    channel: AbstractChannel, topology: Topology, world: World, document: AsyncApiDocument
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    call = ToolClient.build_request(
        f"wire-{uuid.uuid4()}",
        "update_long_term_memory",
        {"memory_id": "not a number"},
        MessageContext(
            server.disc_id, snowflake(), snowflake(), snowflake(), persona.persona_id, 0
        ),
    )
    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert _check_every_delivery(tap, document, call.tool_call_id) == 1


async def test_a_dead_lettered_call_matches_the_document(
    channel: AbstractChannel, topology: Topology, document: AsyncApiDocument
) -> None:
    message_id = str(uuid.uuid4())
    async with tap_events(channel, topology.dead_letter_exchange) as dead:
        await publish_raw(
            channel,
            topology.tool_calls_exchange,
            b"[not, json",
            "update_long_term_memory",
            message_id=message_id,
        )
        [copy] = await dead.wait_for_delivery(message_id=message_id)
    assert copy.body == b"[not, json"
    headers = dict(copy.headers)
    assert document.errors("DeadLetteredToolCall", b"null", headers) == []
    assert str(headers["x-ltm-error"]).startswith("invalid envelope")
    assert headers["x-ltm-attempts"] == 1


@pytest.mark.parametrize("field", ENVELOPE_FIELDS)
async def test_a_call_without_an_envelope_field_is_dead_lettered_and_not_run(
    channel: AbstractChannel,
    topology: Topology,
    world: World,
    document: AsyncApiDocument,
    field: str,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = ToolClient.build_request(
        f"wire-{uuid.uuid4()}",
        "update_long_term_memory",
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        MessageContext(
            server.disc_id, snowflake(), snowflake(), snowflake(), persona.persona_id, 0
        ),
    )
    body = orjson.loads(encode_event(call))
    del body[field]
    raw = orjson.dumps(body)
    assert document.errors("ToolCallRequested", raw, {"schema_version": 1}) != []
    properties = amqp_properties(call)
    properties.pop("headers")
    async with tap_events(channel, topology.dead_letter_exchange) as dead:
        await publish_raw(
            channel,
            topology.tool_calls_exchange,
            raw,
            call.tool_name,
            headers={"schema_version": 1},
            **properties,
        )
        [copy] = await dead.wait_for_delivery(message_id=str(call.event_id))
    reason = str(copy.headers["x-ltm-error"])
    assert reason.startswith("invalid envelope") and field in reason
    assert await world.inbox(call.tool_call_id) is None
    assert await world.content(memory_id) == "likes tea"
