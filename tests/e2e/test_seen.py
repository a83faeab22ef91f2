"""What the LLM saw, end to end: two channels of one server on two gateway processes show the
LLM the same memory; the first changes it, the second's update built on what it was shown is
refused with the memory's text now, and its retry from a new read applies. Two workers racing
with updates built on one revision apply exactly one of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel

from contracts import MemoryStatus, ToolCallCompleted, ToolCallRequested, Topology
from harness.broker import own_topology, publish_tool_call, tap_events
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import Persona, World, tool_call
from infra.settings import Settings
from tests.e2e.conftest import new_worker
from tests.support.gateway_reader import GatewayReader

FIRST_SHARD, SECOND_SHARD = 9_100, 9_101  # shards of this module's own
SHARD_COUNT = 9_102
FRIDAYS = "Movie night is on Fridays."
SATURDAYS = "Movie night is on Saturdays."
EIGHT_PM = "Movie night is on Fridays at 8 pm."


@pytest.fixture(scope="module")
async def channels(
    services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[GatewayReader, GatewayReader]]:
    """Two gateway processes, one shard each: the two channels' bots."""
    logs = tmp_path_factory.mktemp("channels")
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            GatewayReader(services, logs / "first.log", shard=(FIRST_SHARD, SHARD_COUNT))
        )
        second = await stack.enter_async_context(
            GatewayReader(services, logs / "second.log", shard=(SECOND_SHARD, SHARD_COUNT))
        )
        yield first, second


def _context(persona: Persona, triggerer: str, name: str) -> dict[str, Any]:
    return {
        "guild_id": persona.server.disc_id,
        "channel_id": snowflake(),
        "triggerer_id": triggerer,
        "bot_user_id": "100000000000000001",
        "persona_id": persona.persona_id,
        "participants": [{"user_id": triggerer, "display_label": name, "aliases": [name]}],
    }


@pytest.mark.usefixtures("worker_process")
async def test_the_second_channel_is_told_what_the_first_changed(
    channels: tuple[GatewayReader, GatewayReader], world: World
) -> None:
    first, second = channels
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, FRIDAYS)
    key = str(memory_id)
    for reader in channels:
        shown = await reader.read(server.disc_id, persona.persona_id)
        assert f"ID:{memory_id} {FRIDAYS}" in shown["server_lines"]
        assert shown["revisions"][key] == 0
    bob, carol = snowflake(), snowflake()

    applied = await first.call(
        f"e2e-seen-1-{memory_id}",
        {"memory_id": memory_id, "memory_content": SATURDAYS},
        _context(persona, bob, "Bob"),
    )
    assert applied["status"] == MemoryStatus.UPDATED.value, applied

    # A minute later, in the other channel, from what the LLM was shown there.
    refused = await second.call(
        f"e2e-seen-2-{memory_id}",
        {"memory_id": memory_id, "memory_content": EIGHT_PM},
        _context(persona, carol, "Carol"),
    )
    assert refused["status"] == MemoryStatus.CONFLICT.value, refused
    assert refused["success"] is False
    assert f'"{SATURDAYS}"' in refused["message"]
    assert refused["current_content"] == SATURDAYS
    [revision] = await world.revisions(memory_id)
    assert refused["current_revision_id"] == revision["revision_id"]
    assert await world.content(memory_id) == SATURDAYS

    # The bot reads again (the change's invalidation reached it), and the retry applies.
    await second.heard("persona_state", server.disc_id)
    again = await second.read(server.disc_id, persona.persona_id)
    assert f"ID:{memory_id} {SATURDAYS}" in again["server_lines"]
    assert again["revisions"][key] == revision["revision_id"]
    retried = await second.call(
        f"e2e-seen-3-{memory_id}",
        {"memory_id": memory_id, "memory_content": "Movie night is on Saturdays at 8 pm."},
        _context(persona, carol, "Carol"),
    )
    assert retried["status"] == MemoryStatus.UPDATED.value, retried
    assert await world.content(memory_id) == "Movie night is on Saturdays at 8 pm."


def _update(persona: Persona, memory_id: int, content: str, seen: int | None) -> ToolCallRequested:
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": content}, triggerer_id=snowflake()
    )
    if seen is None:
        return call
    context = call.context.model_copy(update={"seen": {str(memory_id): seen}})
    return call.model_copy(update={"context": context})


async def _answers(
    channel: AbstractChannel, topology: Topology, calls: list[ToolCallRequested]
) -> dict[str, ToolCallCompleted]:
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await asyncio.gather(*(publish_tool_call(channel, topology, call) for call in calls))
        await tap.wait_until(
            lambda t: len(t.events(ToolCallCompleted)) >= len(calls),
            timeout=60,
            what="an answer to every call",
        )
    answers = {}
    for event in tap.events(ToolCallCompleted):
        assert isinstance(event, ToolCallCompleted)
        answers[event.tool_call_id] = event
    return answers


async def test_two_workers_racing_on_one_revision_apply_exactly_one(
    world: World, services: TestServices, settings: Settings, tmp_path: Path
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memories = [await world.server_memory(persona, f"fact {n}") for n in range(12)]
    calls = [
        _update(persona, memory_id, f"fact {n} by {who}", seen=0)
        for n, memory_id in enumerate(memories)
        for who in ("one", "two")
    ]
    async with own_topology(settings, "seen", publisher_confirms=True) as (own, topology, channel):
        env = {"LTM_AMQP_PREFIX": own.amqp_prefix}
        with (
            new_worker(services, tmp_path, "one", **env) as one,
            new_worker(services, tmp_path, "two", **env) as two,
        ):
            await asyncio.gather(one.wait_ready_async(), two.wait_ready_async())
            answers = await _answers(channel, topology, calls)

            # A redelivered call repeats its stored answer; a call without seen writes as before.
            repeated = await _answers(channel, topology, calls[:2])
            plain = _update(persona, memories[0], "fact 0 at last", seen=None)
            [last] = (await _answers(channel, topology, [plain])).values()

    for n, memory_id in enumerate(memories):
        pair = [answers[call.tool_call_id] for call in calls[2 * n : 2 * n + 2]]
        statuses = sorted(answer.status.value for answer in pair)
        assert statuses == [MemoryStatus.CONFLICT.value, MemoryStatus.UPDATED.value], statuses
        [applied] = [a for a in pair if a.status is MemoryStatus.UPDATED]
        [conflict] = [a for a in pair if a.status is MemoryStatus.CONFLICT]
        assert conflict.data.current_content == applied.data.content_saved
        assert len(await world.revisions(memory_id)) == (2 if n == 0 else 1)
    for call in calls[:2]:
        first, again = answers[call.tool_call_id], repeated[call.tool_call_id]
        assert (again.status, again.message, again.data) == (
            first.status,
            first.message,
            first.data,
        )
    assert last.status is MemoryStatus.UPDATED
    assert await world.content(memories[0]) == "fact 0 at last"
