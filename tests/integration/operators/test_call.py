"""`ltm call` against the real broker, the test answering in the worker's place."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contracts import (
    REPLAYED_HEADER,
    MemoryStatus,
    ResultData,
    ToolCallCompleted,
    Topology,
    amqp_properties,
    decode_tool_call,
    encode_event,
    result_routing_key,
)
from harness.broker import queue_depth
from infra.settings import Settings
from ltm.commands.call import call_and_print
from tests.integration.operators.seeding import tool_call
from tests.support.tracing import spans_in_memory

# Far below the call's own timeout: an answer that waited for it fails here.
ANSWER_DEADLINE_S = 10.0


@asynccontextmanager
async def answering(
    channel: AbstractChannel, topology: Topology, status: MemoryStatus, *, replayed: bool
) -> AsyncIterator[list[AbstractIncomingMessage]]:
    """Takes each call from the work queue and answers it with `status`, as a worker would
    (`replayed`: as from its idempotency record); yields the calls as they came."""
    calls: list[AbstractIncomingMessage] = []
    work = await channel.declare_queue(topology.worker_queue, passive=True)
    events = await channel.get_exchange(topology.events_exchange, ensure=False)

    async def answer(message: AbstractIncomingMessage) -> None:
        calls.append(message)
        call = decode_tool_call(message.body)
        result = ToolCallCompleted(
            causation_id=call.event_id,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            guild_id=call.context.guild_id,
            channel_id=call.context.channel_id,
            shard_id=call.context.shard_id,
            success=status.success,
            status=status,
            message="Server memory ID:7 now holds the new text.",
            data=ResultData(scope="server_wide", memory_id=7, content_saved="likes\ncoffee"),
        )
        properties = amqp_properties(result)
        if replayed:
            properties["headers"] = {**properties["headers"], REPLAYED_HEADER: True}
        await events.publish(
            aio_pika.Message(encode_event(result), **properties),
            routing_key=result_routing_key(result.shard_id),
        )
        await message.ack()

    tag = await work.consume(answer)
    try:
        yield calls
    finally:
        await work.cancel(tag)


async def _call(settings: Settings, body: bytes, *, as_json: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.wait_for(
        call_and_print(settings, body, timeout=30, as_json=as_json, out=out, err=err),
        ANSWER_DEADLINE_S,
    )
    return code, out.getvalue(), err.getvalue()


async def test_a_tool_no_queue_takes_is_refused_at_once_naming_it(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    call = tool_call("tc-unknown-tool").model_copy(update={"tool_name": "update_ltm"})

    code, out, err = await _call(ops_settings, encode_event(call))

    assert code == 1
    assert f"no queue is bound for tool update_ltm on {topology.tool_calls_exchange}" in err
    assert out == ""
    assert await queue_depth(channel, topology.worker_queue) == 0


async def test_a_success_prints_the_fields_and_exits_0(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    async with answering(channel, topology, MemoryStatus.UPDATED, replayed=False):
        code, out, err = await _call(ops_settings, encode_event(tool_call("tc-fresh")))

    assert code == 0, err
    assert out.splitlines() == [
        "tool call:      tc-fresh",
        "success:        yes",
        "status:         memory_updated_successfully",
        "message:        Server memory ID:7 now holds the new text.",
        "scope:          server_wide",
        "memory id:      7",
        "content saved:  likes\\ncoffee",
    ]
    assert "published tool call tc-fresh" in err


@pytest.mark.parametrize(
    ("status", "code", "already"),
    [(MemoryStatus.UPDATED, 0, "applied"), (MemoryStatus.NOT_FOUND, 1, "answered this way")],
)
async def test_an_answer_from_the_idempotency_record_says_so(
    ops_settings: Settings,
    channel: AbstractChannel,
    topology: Topology,
    status: MemoryStatus,
    code: int,
    already: str,
) -> None:
    notice = (
        f"answered from the idempotency record: the call was already {already}; nothing changed now"
    )
    body = encode_event(tool_call("tc-again"))
    async with answering(channel, topology, status, replayed=True):
        text = await _call(ops_settings, body)
        as_json = await _call(ops_settings, body, as_json=True)

    assert text[0] == as_json[0] == code
    assert text[1].splitlines()[-1] == notice
    # With --json, stdout is the result event alone, and the notice goes to stderr.
    assert json.loads(as_json[1])["status"] == status.value
    assert notice in as_json[2]


async def test_success_false_exits_1_and_prints_the_result(
    ops_settings: Settings, channel: AbstractChannel, topology: Topology
) -> None:
    async with answering(channel, topology, MemoryStatus.NOT_FOUND, replayed=False):
        code, out, _ = await _call(
            ops_settings, encode_event(tool_call("tc-missing")), as_json=True
        )

    assert code == 1
    result = json.loads(out)
    assert (result["success"], result["status"]) == (False, "memory_update_failed_not_found")


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    with spans_in_memory() as exporter:
        yield exporter


async def test_traced_the_call_starts_a_trace_and_names_it(
    ops_settings: Settings,
    channel: AbstractChannel,
    topology: Topology,
    traced: InMemorySpanExporter,
) -> None:
    async with answering(channel, topology, MemoryStatus.UPDATED, replayed=False) as calls:
        code, _, err = await _call(ops_settings, encode_event(tool_call("tc-traced")))

    assert code == 0, err
    [send] = traced.get_finished_spans()
    trace_id = f"{send.context.trace_id:032x}"
    assert send.name == f"send {topology.tool_calls_exchange}"
    assert f"published tool call tc-traced (trace {trace_id}); waiting" in err
    # The worker continues from the call's headers.
    [call] = calls
    headers = call.headers or {}
    assert str(headers["traceparent"]).split("-")[1:3] == [trace_id, f"{send.context.span_id:016x}"]


async def test_a_body_that_is_not_a_tool_call_is_a_usage_error(ops_settings: Settings) -> None:
    code, out, err = await _call(ops_settings, b'{"arguments": {}, "context": 5}')

    assert code == 2
    assert err.startswith("ltm call: the file is not a tool call: ")
    assert out == ""


async def test_a_missing_topology_is_one_clear_line(settings: Settings) -> None:
    elsewhere = settings.model_copy(update={"amqp_prefix": "no-such-prefix"})

    code, _, err = await _call(elsewhere, encode_event(tool_call("tc-nowhere")))

    assert code == 1
    assert "run `ltm topology` first" in err
