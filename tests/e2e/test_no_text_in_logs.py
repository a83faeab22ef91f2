"""No log line of any process, at DEBUG, holds a memory's text or a tool call's arguments, and
the audit stream never holds them either.

A worker, a gateway (posting to a fake Discord) and `ltm` commands run with DEBUG logs on tool
calls whose texts, arguments and participants' names carry unique markers: a creation, an
update, invalid calls (a text for a memory id, a memory that does not exist, a text too long)
and a body the worker dead-letters unparsed. Every process's log output is searched for the
markers, then every message of the audit stream read raw from `first`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    UPDATE_LONG_TERM_MEMORY,
    ToolCallRequested,
    Topology,
    encode_event,
)
from harness.broker import own_topology, publish_raw, publish_tool_call, queue_depth
from harness.fake_discord import FakeDiscord
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, participant, tool_call
from infra.settings import Settings
from tests.support.commands import run_ltm

SHARD = 9_300  # a shard of this module's own: no other test's gateway consumes it
# Quiet this long: the stream has delivered what it holds.
STREAM_IDLE_S = 3.0


def _marker(what: str) -> str:
    return f"mk{uuid.uuid4().hex}{what}"


@pytest.fixture
async def own(settings: Settings) -> AsyncIterator[tuple[Settings, Topology, AbstractChannel]]:
    """A topology of its own: its audit stream holds only this test's events."""
    async with own_topology(settings, "logs", publisher_confirms=True) as running:
        yield running


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


def _debug_env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        "LTM_AMQP_PREFIX": settings.amqp_prefix,
        "LTM_LOG_LEVEL": "DEBUG",
        "LTM_LOG_FORMAT": "json",
        **extra,
    }


async def _read_stream_raw(channel: AbstractChannel, topology: Topology) -> list[bytes]:
    """Every message of the audit stream from `first`, its body and headers as bytes."""
    await channel.set_qos(prefetch_count=100)
    stream = await channel.declare_queue(topology.audit_stream, passive=True)
    seen: list[bytes] = []
    arrived = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        seen.append(message.body + repr(message.headers).encode())
        arrived.set()
        await message.ack()

    tag = await stream.consume(on_message, arguments={"x-stream-offset": "first"})
    try:
        while True:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), STREAM_IDLE_S)
            except TimeoutError:
                return seen
    finally:
        await stream.cancel(tag)


def _call_file(tmp_path: Path, call: ToolCallRequested) -> str:
    path = tmp_path / f"{call.tool_call_id}.json"
    path.write_bytes(encode_event(call))
    return str(path)


async def test_no_marked_text_reaches_a_log_line_or_the_audit_stream(
    services: TestServices,
    own: tuple[Settings, Topology, AbstractChannel],
    world: World,
    fake_discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    settings, topology, channel = own
    markers: list[str] = []

    def marked(what: str) -> str:
        markers.append(_marker(what))
        return markers[-1]

    server = await world.server()
    persona: Persona = await world.persona(server, nickname=marked("persona"))
    triggerer = snowflake()
    people = (participant(triggerer, marked("name")),)
    existing = await world.server_memory(persona, marked("seeded"))
    channel_id = snowflake()

    def call(arguments: object, tool_name: str = UPDATE_LONG_TERM_MEMORY) -> ToolCallRequested:
        return tool_call(
            persona,
            arguments,
            triggerer_id=triggerer,
            participants=people,
            shard_id=SHARD,
            channel_id=channel_id,
            tool_name=tool_name,
        )

    created_text = marked("created")
    created = call(
        {"memory_content": f"{{user}} {created_text}", "memory_scope": "server_wide"},
        tool_name=CREATE_LONG_TERM_MEMORY,
    )
    updated = call({"memory_id": existing, "memory_content": f"{{user}} {marked('updated')}"})
    invalid = [
        call({"memory_id": marked("id"), "memory_content": marked("invalid")}),
        call({"memory_id": 2**40, "memory_content": marked("missing")}),
        call({"memory_id": existing, "memory_content": marked("long") + "x" * 20_000}),
    ]
    dead = json.loads(encode_event(call({"memory_id": existing, "memory_content": marked("dead")})))
    del dead["event_id"]  # an invalid envelope: dead-lettered unparsed

    worker = LtmProcess(services, ("worker",), tmp_path / "worker.log", env=_debug_env(settings))
    gateway = LtmProcess(
        services,
        ("gateway", "--shards", str(SHARD), "--shard-count", str(SHARD + 1)),
        tmp_path / "gateway.log",
        env=_debug_env(settings, DISCORD_TOKEN="fake-token-logs", DISCORD_API_URL=fake_discord.url),
    )
    commands: list[str] = []
    shown: list[str] = []
    with worker, gateway:
        await worker.wait_ready_async()
        await gateway.wait_ready_async()
        for one in (created, updated, *invalid):
            done = await run_ltm(
                services, "call", "--json", _call_file(tmp_path, one), **_debug_env(settings)
            )
            assert done.code in (0, 1), done.stderr
            commands.append(done.stderr)
        await publish_tool_call(channel, topology, updated)  # a redelivery, answered again
        await publish_raw(
            channel,
            topology.tool_calls_exchange,
            json.dumps(dead).encode(),
            dead["tool_name"],
            headers={"schema_version": 1},
        )

        async def dead_lettered() -> bool:
            return await queue_depth(channel, topology.dead_letter_queue) >= 1

        await eventually(dead_lettered, what="the invalid body dead-lettered")

        async def posted() -> bool:
            return len(fake_discord.messages_in(channel_id)) >= 2

        await eventually(posted, what="the creation's and the update's notices posted")
        for command in (
            ("audit", "tail", "--from", "first", "--json"),
            ("audit", "tail", "--from", "first"),
            ("audit", "history", str(existing)),
            ("dlq", "list"),
            ("dlq", "list", "--json"),
        ):
            done = await run_ltm(services, *command, **_debug_env(settings))
            assert done.code == 0, done.stderr
            commands.append(done.stderr)  # stdout shows texts to the operator: not a log
            shown.append(done.stdout)
        logs = {"worker": worker.output(), "gateway": gateway.output()}
    stream = await _read_stream_raw(channel, topology)

    # The run did what it should: it logged, wrote the changes, posted the notices.
    assert '"event":' in logs["worker"] and '"event":' in logs["gateway"]
    assert all(one.tool_call_id in logs["worker"] for one in (created, updated, *invalid))
    # The texts were there to leak: the tail joins them from the revisions for the operator.
    assert created_text in shown[0]
    # The creation's memory.created and the update's memory.updated. The stream may also hold
    # what the worker's outbox sweep found left by another test in the shared database.
    ours = [
        body for body in stream if any(c.tool_call_id.encode() in body for c in (created, updated))
    ]
    assert len(ours) == 2
    for name, text in [*logs.items(), *(("ltm", stderr) for stderr in commands)]:
        leaked = [marker for marker in markers if marker in text]
        assert not leaked, f"{name}'s log holds {leaked}"
    for body in stream:
        assert not [marker for marker in markers if marker.encode() in body], body
