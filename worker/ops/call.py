"""`ltm call --json FILE`: publish one tool call and print its answer, for trying things by hand."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any, TextIO

import aio_pika
import orjson

from contracts import (
    UPDATE_LONG_TERM_MEMORY,
    InvalidEnvelope,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    decode_event,
    decode_tool_call,
    encode_event,
    result_routing_key,
    utc_now,
)
from infra.settings import Settings

__all__ = ["call_and_print", "complete_envelope"]


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


async def call_and_print(
    settings: Settings, body: bytes, *, timeout: float, out: TextIO = sys.stdout
) -> int:
    """Exit 0 with the result printed as JSON; 1 when no answer came in time or input is bad."""
    try:
        call = complete_envelope(body)
    except InvalidEnvelope as error:
        print(f"ltm call: {error}", file=sys.stderr)
        return 1
    topology = Topology(settings.amqp_prefix)
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await channel.get_exchange(topology.events_exchange, ensure=False)
        # A private copy of the shard's results: a gateway consuming the shard still gets its own.
        replies = await channel.declare_queue(exclusive=True, auto_delete=True)
        await replies.bind(events, routing_key=result_routing_key(call.context.shard_id))
        answered: asyncio.Future[ToolCallCompleted] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != call.tool_call_id:
                    return
                event = decode_event(message.body)
                if isinstance(event, ToolCallCompleted) and not answered.done():
                    answered.set_result(event)

        await replies.consume(on_reply)
        tool_calls = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
        await tool_calls.publish(
            aio_pika.Message(encode_event(call), **amqp_properties(call)),
            routing_key=call.tool_name,
        )
        print(f"published tool call {call.tool_call_id}; waiting for its result", file=sys.stderr)
        try:
            result = await asyncio.wait_for(answered, timeout)
        except TimeoutError:
            print(
                f"ltm call: no result within {timeout:g} s (is a worker running?)", file=sys.stderr
            )
            return 1
    out.write(orjson.dumps(orjson.loads(encode_event(result)), option=orjson.OPT_INDENT_2).decode())
    out.write("\n")
    return 0
