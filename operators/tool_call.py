"""Publishing one tool call and waiting for its answer, as the bot's tool client does: the use
case behind `ltm call FILE`.

The call is published `mandatory`, with publisher confirms: a tool name no queue is bound for
comes back from the broker at once (`Unroutable`), instead of an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aio_pika
import aiormq
import orjson

from contracts import (
    REPLAYED_HEADER,
    UPDATE_LONG_TERM_MEMORY,
    InvalidEnvelope,
    ToolCallCompleted,
    ToolCallRequested,
    amqp_properties,
    decode_event,
    decode_tool_call,
    encode_event,
    result_routing_key,
    utc_now,
)
from infra.messaging import amqp
from infra.observability import tracing
from infra.settings import Settings

__all__ = ["ReceivedResult", "Unroutable", "complete_envelope", "publish_and_wait"]


def complete_envelope(body: bytes) -> ToolCallRequested:
    """Reads a whole `tool_call.requested`, or just its fields: the envelope is filled in."""
    try:
        fields: Any = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise InvalidEnvelope(f"not JSON: {error}") from None
    if not isinstance(fields, dict):
        raise InvalidEnvelope("the file must hold a JSON object")
    fields.setdefault("event_id", str(uuid.uuid4()))
    fields.setdefault("event_type", ToolCallRequested.EVENT_TYPE)
    fields.setdefault("schema_version", 1)
    fields.setdefault("occurred_at", utc_now().isoformat())
    fields.setdefault("tool_call_id", f"cli-{uuid.uuid4()}")
    fields.setdefault("tool_name", UPDATE_LONG_TERM_MEMORY)
    return decode_tool_call(orjson.dumps(fields))


@dataclass(frozen=True, slots=True)
class ReceivedResult:
    """The result of a call as it came back, and whether the worker repeated it from the
    idempotency record."""

    result: ToolCallCompleted
    replayed: bool


class Unroutable(Exception):
    """The broker returned the call: no queue is bound for its tool name."""


async def publish_and_wait(
    settings: Settings,
    call: ToolCallRequested,
    timeout: float,
    on_published: Callable[[str | None], None],
) -> ReceivedResult:
    """Publishes `call` and waits for its result; `on_published` hears of it once the broker
    took the call, with the trace id when tracing is on. Raises `Unroutable` when no queue is
    bound for its tool, `ChannelNotFoundEntity` without the topology, `TimeoutError` when no
    answer came within `timeout` seconds."""
    topology = settings.topology
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=True)
        # A private copy of the shard's results: a gateway consuming the shard still gets its own.
        # Named among the bots' queues: their broker account may declare those.
        replies = await channel.declare_queue(
            topology.call_queue(uuid.uuid4().hex), exclusive=True, auto_delete=True
        )
        await replies.bind(events, routing_key=result_routing_key(call.context.shard_id))
        answered: asyncio.Future[ReceivedResult] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != call.tool_call_id:
                    return
                event = decode_event(message.body)
                if isinstance(event, ToolCallCompleted) and not answered.done():
                    replayed = (message.headers or {}).get(REPLAYED_HEADER) is True
                    answered.set_result(ReceivedResult(event, replayed))

        await replies.consume(on_reply)
        tool_calls = await channel.get_exchange(topology.tool_calls_exchange, ensure=True)
        # As the bot's tool client does: the worker may take calls of trusted users only.
        properties = amqp_properties(call)
        with tracing.sending(
            exchange=tool_calls.name,
            routing_key=call.tool_name,
            message_id=properties["message_id"],
            conversation_id=call.tool_call_id,
            headers=properties["headers"],
        ) as span:
            confirmation = await tool_calls.publish(
                aio_pika.Message(encode_event(call), **properties, user_id=settings.amqp_user),
                routing_key=call.tool_name,
                mandatory=True,
            )
            if not isinstance(confirmation, aiormq.spec.Basic.Ack):
                tracing.failed(span, "unroutable", "no queue takes the tool")
                raise Unroutable()
        # With tracing on, the id to look the call up by in the trace viewer.
        on_published(tracing.trace_id_of(span))
        return await asyncio.wait_for(answered, timeout)
