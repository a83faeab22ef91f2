"""The operator commands as an operator runs them: real `ltm` processes, their output, their
exit codes, and a reader that goes away (`| head`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    REPLAYED_HEADER,
    CacheInvalidate,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    audit_routing_key,
    encode_event,
)
from harness.broker import own_topology, publish_raw, publish_tool_call, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World
from harness.world import tool_call as call_on
from infra.settings import Settings
from infra.storage.revisions import REVISION_INSERT
from tests.integration.operators.seeding import (
    memory_updated,
    publish_event,
    tool_call,
    worker_dead_letter,
)
from tests.support.commands import run_ltm, run_ltm_into_closed_pipe, run_ltm_into_head

# 128 + SIGPIPE: how a shell reports a command whose reader went away.
OUTPUT_CLOSED = 141


@pytest.fixture
async def operated(settings: Settings) -> AsyncIterator[tuple[Settings, AbstractChannel]]:
    """A topology of its own: its audit stream and dead-letter queue hold only this test's."""
    async with own_topology(settings, "cmd", publisher_confirms=True) as (own, _, channel):
        yield own, channel


async def _seed_stream_and_dead_letter(
    own: Settings, channel: AbstractChannel, events: int
) -> None:
    topology = Topology(own.amqp_prefix)
    await asyncio.gather(
        *(publish_event(channel, topology, _invalidation(n)) for n in range(events))
    )
    await worker_dead_letter(channel, topology, tool_call("tc-piped"), "RuntimeError('boom')")


def _invalidation(n: int) -> CacheInvalidate:
    return CacheInvalidate(cache="user", key=snowflake(), tool_call_id=f"tc-piped-{n}")


async def _memory_with_revisions(world: World, count: int) -> int:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "v0")
    for n in range(1, count + 1):
        await world.execute(
            REVISION_INSERT
            + " VALUES ('server_wide', %s, 'updated', %s, %s, %s, NULL, %s, %s, %s, now())",
            memory_id,
            f"v{n - 1}",
            f"v{n}\nsecond line",
            server.server_id,
            persona.lineage,
            snowflake(),
            f"tc-history-{memory_id}-{n}",
        )
    return memory_id


async def test_audit_tail_into_head_ends_quietly_after_the_first_line(
    services: TestServices, operated: tuple[Settings, AbstractChannel]
) -> None:
    own, channel = operated
    # Far more than a pipe holds: the tail is still writing when head has gone.
    await _seed_stream_and_dead_letter(own, channel, events=800)

    piped = await run_ltm_into_head(
        services, "audit", "tail", "--from", "first", LTM_AMQP_PREFIX=own.amqp_prefix
    )

    assert piped.stdout.startswith("TIME")
    assert piped.code == OUTPUT_CLOSED
    assert piped.stderr == ""


@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout", "stdout and stderr"])
@pytest.mark.parametrize(
    "command",
    [
        ("audit", "tail", "--from", "first"),
        ("audit", "tail", "--from", "first", "--json"),
        ("dlq", "list"),
        ("dlq", "list", "--json"),
        ("audit", "history", "{memory_id}"),
        ("audit", "history", "{memory_id}", "--json"),
    ],
    ids=" ".join,
)
async def test_a_command_whose_reader_is_gone_ends_quietly(
    services: TestServices,
    operated: tuple[Settings, AbstractChannel],
    world: World,
    command: tuple[str, ...],
    stderr_too: bool,
) -> None:
    own, channel = operated
    await _seed_stream_and_dead_letter(own, channel, events=3)
    memory_id = await _memory_with_revisions(world, 2)
    args = [part.format(memory_id=memory_id) for part in command]

    piped = await run_ltm_into_closed_pipe(
        services, *args, stderr_too=stderr_too, LTM_AMQP_PREFIX=own.amqp_prefix
    )

    assert piped.code == OUTPUT_CLOSED
    assert piped.stderr == ""


def _call_file(tmp_path: Path, call: ToolCallRequested) -> Path:
    path = tmp_path / f"{call.tool_call_id}.json"
    path.write_bytes(encode_event(call))
    return path


@pytest.mark.usefixtures("amqp")
async def test_a_call_to_a_tool_no_queue_takes_is_refused_at_once_naming_it(
    services: TestServices, tmp_path: Path
) -> None:
    call = tool_call(f"tc-{snowflake()}").model_copy(update={"tool_name": "no_such_tool"})
    started = time.monotonic()

    finished = await run_ltm(
        services, "call", "--json", str(_call_file(tmp_path, call)), "--timeout", "30"
    )

    assert finished.code == 1
    assert "no queue is bound for tool no_such_tool" in finished.stderr
    assert "is a worker running" not in finished.stderr
    assert time.monotonic() - started < 15  # not the 30 s timeout


async def test_call_takes_its_file_positionally_and_says_when_it_answers_from_the_record(
    services: TestServices, world: World, tmp_path: Path, worker_process: LtmProcess
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = call_on(
        persona,
        {"memory_id": memory_id, "memory_content": "likes coffee"},
        triggerer_id=snowflake(),
    )
    path = str(_call_file(tmp_path, call))

    first = await run_ltm(services, "call", path)
    again = await run_ltm(services, "call", path)

    assert first.code == 0, first.stderr
    assert "memory_updated_successfully" in first.stdout
    assert "likes coffee" in first.stdout
    assert "idempotency record" not in first.stdout + first.stderr
    assert again.code == 0, again.stderr
    assert "answered from the idempotency record: the call was already applied" in again.stdout
    assert len(await world.revisions(memory_id)) == 1


async def test_call_with_json_prints_the_result_event_and_exits_1_on_a_failure(
    services: TestServices, world: World, tmp_path: Path, worker_process: LtmProcess
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    call = call_on(persona, {"memory_id": 2**40, "memory_content": "x"}, triggerer_id=snowflake())

    finished = await run_ltm(services, "call", "--json", str(_call_file(tmp_path, call)))

    result = json.loads(finished.stdout)
    assert result["tool_call_id"] == call.tool_call_id
    assert result["success"] is False
    assert result["status"] == "memory_update_failed_not_found"
    assert finished.code == 1


async def test_an_answer_from_the_idempotency_record_is_marked_on_the_wire(
    channel: AbstractChannel, topology: Topology, world: World, worker_process: LtmProcess
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "v1")
    call = call_on(
        persona, {"memory_id": memory_id, "memory_content": "v2"}, triggerer_id=snowflake()
    )
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        await publish_tool_call(channel, topology, call)
        await tap.wait_for(ToolCallCompleted, 2, tool_call_id=call.tool_call_id)

    first, again = tap.deliveries_with(correlation_id=call.tool_call_id)
    assert REPLAYED_HEADER not in first.headers
    assert again.headers[REPLAYED_HEADER] is True


async def _stream_bodies(services: TestServices, own: Settings) -> list[dict[str, object]]:
    tailed = await run_ltm(
        services, "audit", "tail", "--from", "first", "--json", LTM_AMQP_PREFIX=own.amqp_prefix
    )
    assert tailed.code == 0, tailed.stderr
    return [json.loads(line) for line in tailed.stdout.splitlines()]


async def _publish_version_1_memory_event(channel: AbstractChannel, topology: Topology) -> None:
    """A `memory.updated` as the worker wrote it before the upgrade: version 1, with texts."""
    event = memory_updated("tc-before-the-upgrade", 1)
    body = {
        **json.loads(encode_event(event)),
        "schema_version": 1,
        "content_before": "old text before",
        "content_after": "old text after",
    }
    properties = amqp_properties(event)
    properties["headers"] = {"schema_version": 1}
    await publish_raw(
        channel,
        topology.events_exchange,
        json.dumps(body).encode(),
        audit_routing_key("updated", "server_wide"),
        **properties,
    )


async def test_recreating_the_audit_stream_without_a_terminal_needs_yes(
    services: TestServices, operated: tuple[Settings, AbstractChannel]
) -> None:
    own, channel = operated
    await _publish_version_1_memory_event(channel, Topology(own.amqp_prefix))

    refused = await run_ltm(
        services, "topology", "--recreate-audit-stream", LTM_AMQP_PREFIX=own.amqp_prefix
    )

    assert refused.code == 2
    assert "pass --yes" in refused.stderr
    assert [body["tool_call_id"] for body in await _stream_bodies(services, own)] == [
        "tc-before-the-upgrade"
    ]


async def test_recreating_the_audit_stream_with_yes_empties_it_and_binds_it_anew(
    services: TestServices, operated: tuple[Settings, AbstractChannel]
) -> None:
    own, channel = operated
    topology = Topology(own.amqp_prefix)
    await _publish_version_1_memory_event(channel, topology)
    # A deployment declared before the upgrade: its stream took every event.
    stream = await channel.declare_queue(topology.audit_stream, passive=True)
    await stream.bind(topology.events_exchange, routing_key="#")

    done = await run_ltm(
        services, "topology", "--recreate-audit-stream", "--yes", LTM_AMQP_PREFIX=own.amqp_prefix
    )
    await publish_raw(
        channel,
        topology.events_exchange,
        encode_event(_invalidation(1)),
        "cache.user.42",
        **amqp_properties(_invalidation(1)),
    )
    await publish_event(channel, topology, memory_updated("tc-after-the-upgrade", 2))

    assert done.code == 0, done.stderr
    bodies = await _stream_bodies(services, own)
    # The old event is gone, texts and all; an invalidation is no longer the stream's.
    assert [body["tool_call_id"] for body in bodies] == ["tc-after-the-upgrade"]
    assert "old text" not in json.dumps(bodies)


async def test_declaring_the_topology_again_unbinds_the_streams_former_catch_all(
    services: TestServices, operated: tuple[Settings, AbstractChannel]
) -> None:
    own, channel = operated
    topology = Topology(own.amqp_prefix)
    stream = await channel.declare_queue(topology.audit_stream, passive=True)
    await stream.bind(topology.events_exchange, routing_key="#")

    declared = await run_ltm(services, "topology", LTM_AMQP_PREFIX=own.amqp_prefix)
    await publish_raw(
        channel,
        topology.events_exchange,
        encode_event(_invalidation(2)),
        "cache.user.42",
        **amqp_properties(_invalidation(2)),
    )
    await publish_event(channel, topology, memory_updated("tc-a-change", 3))

    assert declared.code == 0, declared.stderr
    assert [body["tool_call_id"] for body in await _stream_bodies(services, own)] == ["tc-a-change"]
