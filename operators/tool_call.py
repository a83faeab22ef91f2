"""Publishing one tool call and waiting for its answer, as the bot's tool client does: the use
case behind `ltm call FILE`.

The call is published `mandatory`, with publisher confirms: a tool name no queue is bound for
comes back from the broker at once (`Unroutable`), instead of an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractExchange

from contracts import (
    REPLAYED_HEADER,
    UPDATE_LONG_TERM_MEMORY,
    Event,
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

__all__ = [
    "ReceivedResult",
    "Unroutable",
    "awaiting_answer",
    "complete_envelope",
    "publish_and_wait",
    "publish_mandatory",
]

Answer = TypeVar("Answer")


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


@asynccontextmanager
async def awaiting_answer(
    settings: Settings,
    *,
    shard_id: int,
    correlation_id: str,
    read: Callable[[Event, Mapping[str, Any]], Answer | None],
    queue: str | None = None,
) -> AsyncIterator[tuple[AbstractExchange, asyncio.Future[Answer]]]:
    """A connection with a private copy of the shard's results (a gateway consuming the shard
    still gets its own), for the block: the tool-call exchange to publish to, and the future
    of the first answer about `correlation_id` that `read` recognises (from the event and its
    headers). `queue`: the copy's name, among those the caller's broker account may declare
    (by default a bot's, as `ltm call` runs)."""
    topology = settings.topology
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=True)
        replies = await channel.declare_queue(
            queue or topology.call_queue(uuid.uuid4().hex), exclusive=True, auto_delete=True
        )
        await replies.bind(events, routing_key=result_routing_key(shard_id))
        answered: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != correlation_id:
                    return
                answer = read(decode_event(message.body), message.headers or {})
                if answer is not None and not answered.done():
                    answered.set_result(answer)

        await replies.consume(on_reply)
        yield await channel.get_exchange(topology.tool_calls_exchange, ensure=True), answered


async def publish_mandatory(
    exchange: AbstractExchange,
    event: Event,
    routing_key: str,
    *,
    user_id: str | None,
    properties: Mapping[str, Any] | None = None,
) -> None:
    """Publishes `event` `mandatory`, confirmed; raises `Unroutable` when no queue took it.
    `user_id`: the broker user, set as the bot's tool client sets it (the worker may take
    messages of trusted users only); `properties`: the event's own (`amqp_properties`), or
    those a span has added its trace context to."""
    given = amqp_properties(event) if properties is None else properties
    confirmation = await exchange.publish(
        aio_pika.Message(encode_event(event), **given, user_id=user_id),
        routing_key=routing_key,
        mandatory=True,
    )
    if not isinstance(confirmation, aiormq.spec.Basic.Ack):
        raise Unroutable()


def _tool_call_result(event: Event, headers: Mapping[str, Any]) -> ReceivedResult | None:
    if not isinstance(event, ToolCallCompleted):
        return None
    return ReceivedResult(event, replayed=headers.get(REPLAYED_HEADER) is True)


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
    async with awaiting_answer(
        settings,
        shard_id=call.context.shard_id,
        correlation_id=call.tool_call_id,
        read=_tool_call_result,
    ) as (tool_calls, answered):
        properties = amqp_properties(call)
        with tracing.sending(
            exchange=tool_calls.name,
            routing_key=call.tool_name,
            message_id=properties["message_id"],
            conversation_id=call.tool_call_id,
            headers=properties["headers"],
        ) as span:
            try:
                await publish_mandatory(
                    tool_calls,
                    call,
                    call.tool_name,
                    user_id=settings.amqp_user,
                    properties=properties,
                )
            except Unroutable:
                tracing.failed(span, "unroutable", "no queue takes the tool")
                raise
        # With tracing on, the id to look the call up by in the trace viewer.
        on_published(tracing.trace_id_of(span))
        return await asyncio.wait_for(answered, timeout)
