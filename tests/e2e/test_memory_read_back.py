"""Reading back across processes: two gateway processes have read a server's memories, a tool
call changes one through the real worker and broker, and both see the change on their next
read (and not before their invalidation: until then they answer from their caches)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    MemoryStatus,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
)
from harness.broker import publish_tool_call, tap_events
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World, participant, tool_call
from tests.support.gateway_reader import GatewayReader
from tests.support.read_back import shape_memory

pytestmark = pytest.mark.usefixtures("worker_process")


@pytest.fixture(scope="module")
async def readers(
    services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[GatewayReader, GatewayReader]]:
    logs = tmp_path_factory.mktemp("readers")
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(GatewayReader(services, logs / "first.log"))
        second = await stack.enter_async_context(GatewayReader(services, logs / "second.log"))
        yield first, second


async def _applied(
    channel: AbstractChannel,
    topology: Topology,
    request: ToolCallRequested,
    status: MemoryStatus = MemoryStatus.UPDATED,
) -> ToolCallCompleted:
    """Publishes the tool call and waits for the worker's answer: a success."""
    async with tap_events(channel, topology.events_exchange) as events:
        await publish_tool_call(channel, topology, request)
        [answer] = await events.wait_for(ToolCallCompleted, tool_call_id=request.tool_call_id)
    assert isinstance(answer, ToolCallCompleted)
    assert answer.status is status, answer.message
    return answer


async def test_both_gateways_see_a_server_memory_changed_by_a_tool_call(
    readers: tuple[GatewayReader, GatewayReader],
    world: World,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    changed = await world.server_memory(persona, "movie night is on Fridays")
    await shape_memory(world, changed, created_at=datetime.now(UTC) - timedelta(hours=1))
    newer = await world.server_memory(persona, "the server's colour is teal")
    other = await world.server_memory(persona, "{user} brings snacks")
    await shape_memory(world, other, created_at=datetime.now(UTC) - timedelta(hours=2))
    lines = [
        f"ID:{newer} the server's colour is teal",
        f"ID:{changed} movie night is on Fridays",
        f"ID:{other} {{user}} brings snacks",
    ]
    for reader in readers:
        assert (await reader.read(server.disc_id, persona.persona_id))["server_lines"] == lines

    # A change behind the service's back sends no invalidation: both answer from their caches.
    await world.execute(
        "UPDATE server_memories SET content = 'snacks are on {user}' WHERE server_memory_id = %s",
        other,
    )
    for reader in readers:
        assert (await reader.read(server.disc_id, persona.persona_id))["server_lines"] == lines

    triggerer = snowflake()
    update = tool_call(
        persona,
        {"memory_id": changed, "memory_content": "movie night moved to Saturdays"},
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"),),
    )
    await _applied(channel, topology, update)

    for reader in readers:
        await reader.heard("persona_state", server.disc_id)
        # The next read loads again; the changed memory keeps its place (created_at holds).
        assert (await reader.read(server.disc_id, persona.persona_id))["server_lines"] == [
            f"ID:{newer} the server's colour is teal",
            f"ID:{changed} movie night moved to Saturdays",
            f"ID:{other} snacks are on {{user}}",
        ]


async def test_both_gateways_see_a_personal_memory_changed_by_a_tool_call(
    readers: tuple[GatewayReader, GatewayReader],
    world: World,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    alice_id, alice = await world.user()
    await world.member(server, alice, "alice", display_name="Alice")
    memory_id = await world.personal_memory(alice_id, 0, "{user} plays the violin")
    for reader in readers:
        read = await reader.read(server.disc_id, persona.persona_id, (alice,))
        assert read["personal_lines"] == {alice: [f"ID:{memory_id} {{user}} plays the violin"]}

    triggerer = snowflake()
    update = tool_call(
        persona,
        {
            "memory_id": memory_id,
            "memory_content": "{user} plays the cello",
            "target_user": "Alice",
        },
        triggerer_id=triggerer,
        participants=(participant(triggerer, "Bob"), participant(alice, "Alice")),
    )
    await _applied(channel, topology, update)

    for reader in readers:
        await reader.heard("user", alice)
        read = await reader.read(server.disc_id, persona.persona_id, (alice,))
        assert read["personal_lines"] == {alice: [f"ID:{memory_id} {{user}} plays the cello"]}


async def test_both_gateways_see_memories_created_by_tool_calls(
    readers: tuple[GatewayReader, GatewayReader],
    world: World,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    _, alice = await world.user()
    await world.member(server, alice, "alice", display_name="Alice")
    seeded = await world.server_memory(persona, "movie night is on Fridays")
    await shape_memory(world, seeded, created_at=datetime.now(UTC) - timedelta(hours=1))
    for reader in readers:
        read = await reader.read(server.disc_id, persona.persona_id, (alice,))
        assert read["server_lines"] == [f"ID:{seeded} movie night is on Fridays"]
        assert read["personal_lines"] == {alice: []}

    triggerer = snowflake()
    people = (participant(triggerer, "Bob"), participant(alice, "Alice"))
    server_wide = await _applied(
        channel,
        topology,
        tool_call(
            persona,
            {"memory_content": "the quiz is on Mondays", "memory_scope": "server_wide"},
            triggerer_id=triggerer,
            participants=people,
            tool_name=CREATE_LONG_TERM_MEMORY,
        ),
        MemoryStatus.SAVED,
    )
    personal = await _applied(
        channel,
        topology,
        tool_call(
            persona,
            {
                "memory_content": "{user} bakes",
                "memory_scope": "target_user",
                "target_user": "Alice",
            },
            triggerer_id=triggerer,
            participants=people,
            tool_name=CREATE_LONG_TERM_MEMORY,
        ),
        MemoryStatus.SAVED,
    )

    for reader in readers:
        await reader.heard("persona_state", server.disc_id)
        await reader.heard("user", alice)
        read = await reader.read(server.disc_id, persona.persona_id, (alice,))
        assert read["server_lines"] == [
            f"ID:{server_wide.data.memory_id} the quiz is on Mondays",
            f"ID:{seeded} movie night is on Fridays",
        ]
        assert read["personal_lines"] == {alice: [f"ID:{personal.data.memory_id} {{user}} bakes"]}
