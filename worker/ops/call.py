"""`ltm call FILE`: publish one tool call and print its answer, for trying things by hand.

The call is published `mandatory`, with publisher confirms, as the bot's tool client does: a
tool name no queue is bound for comes back from the broker at once, and the command says so
instead of waiting for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

import aio_pika
import aiormq
import orjson
from aio_pika.exceptions import ChannelNotFoundEntity

from contracts import (
    REPLAYED_HEADER,
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
from infra import amqp, tracing
from infra.settings import Settings
from worker.ops.output import ExitCode, json_document, print_fields, shown_text

__all__ = ["Answer", "call_and_print", "complete_envelope", "print_answer"]


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
class Answer:
    """The result of a call, and whether the worker repeated it from the idempotency record."""

    result: ToolCallCompleted
    replayed: bool


class _Unroutable(Exception):
    """The broker returned the call: no queue is bound for its tool name."""


async def call_and_print(
    settings: Settings,
    body: bytes,
    *,
    timeout: float,
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Publishes the call in `body` and prints its answer.

    Exit code 0 when the call succeeded; 1 when it was answered `success: false`, was
    refused by the broker, or got no answer in time; 2 when `body` is not a tool call.
    """
    out, err = out or sys.stdout, err or sys.stderr
    try:
        call = complete_envelope(body)
    except InvalidEnvelope as error:
        print(f"ltm call: the file is not a tool call: {error}", file=err)
        return ExitCode.USAGE
    topology = settings.topology
    try:
        answer = await _publish_and_wait(settings, topology, call, timeout, err)
    except _Unroutable:
        print(
            f"ltm call: no queue is bound for tool {call.tool_name} on "
            f"{topology.tool_calls_exchange}: the broker returned the call, nothing was done "
            f"(the memory worker takes {UPDATE_LONG_TERM_MEMORY})",
            file=err,
        )
        return ExitCode.FAILED
    except ChannelNotFoundEntity as error:
        print(f"ltm call: {error.args[-1]}: run `ltm topology` first", file=err)
        return ExitCode.FAILED
    except TimeoutError:
        print(
            f"ltm call: the call was queued but no result came within {timeout:g} s "
            "(is a worker running?)",
            file=err,
        )
        return ExitCode.FAILED
    print_answer(answer, as_json=as_json, out=out, err=err)
    return ExitCode.OK if answer.result.success else ExitCode.FAILED


async def _publish_and_wait(
    settings: Settings,
    topology: Topology,
    call: ToolCallRequested,
    timeout: float,
    err: TextIO,
) -> Answer:
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
        answered: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                if message.correlation_id != call.tool_call_id:
                    return
                event = decode_event(message.body)
                if isinstance(event, ToolCallCompleted) and not answered.done():
                    replayed = (message.headers or {}).get(REPLAYED_HEADER) is True
                    answered.set_result(Answer(event, replayed))

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
                raise _Unroutable()
        trace_id = tracing.trace_id_of(span)
        # With tracing on, the id to look the call up by in the trace viewer.
        traced = f" (trace {trace_id})" if trace_id else ""
        print(f"published tool call {call.tool_call_id}{traced}; waiting for its result", file=err)
        return await asyncio.wait_for(answered, timeout)


def print_answer(answer: Answer, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    """The result as fields for a person, or the `tool_call.completed` event as JSON; a note
    when it came from the idempotency record (to stderr with `as_json`)."""
    result = answer.result
    if as_json:
        print(json_document(orjson.loads(encode_event(result))), file=out)
    else:
        fields = [
            ("tool call", result.tool_call_id),
            ("success", "yes" if result.success else "no"),
            ("status", result.status.value),
            ("message", result.message),
            *(
                (name.replace("_", " "), _field_text(value))
                for name, value in result.data.model_dump(mode="json").items()
            ),
        ]
        print_fields([(name, shown_text(text)) for name, text in fields], out)
    if answer.replayed:
        already = "applied" if result.success else "answered this way"
        print(
            f"answered from the idempotency record: the call was already {already}; "
            "nothing changed now",
            file=err if as_json else out,
        )


def _field_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)
