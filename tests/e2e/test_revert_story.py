"""The day after: a user talked the persona into rewriting forty server memories, in two
channels, among real changes by others; one of those memories was changed again by someone
else afterwards. An operator finds the forty, reverts thirty-nine, and leaves the later change.

Every change goes through the real worker; the operator's commands run as real processes.
"""

from __future__ import annotations

import json

import pytest
from aio_pika.abc import AbstractChannel

from contracts import MemoriesReverted, MemoryRestored, ToolCallCompleted, Topology
from harness.broker import publish_tool_call, tap_events
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import Persona, World, tool_call
from tests.support.commands import run_ltm

pytestmark = pytest.mark.usefixtures("worker_process")

MEMORIES = 40


async def _update(
    channel: AbstractChannel,
    topology: Topology,
    persona: Persona,
    changes: list[tuple[int, str, str, str]],
) -> None:
    """(memory, new content, triggerer, channel) each, through the worker, answered."""
    calls = [
        tool_call(
            persona,
            {"memory_id": memory_id, "memory_content": content},
            triggerer_id=triggerer,
            channel_id=channel_id,
        )
        for memory_id, content, triggerer, channel_id in changes
    ]
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        for call in calls:
            await publish_tool_call(channel, topology, call)
        for call in calls:
            [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
            assert result.success, result


async def test_forty_memories_rewritten_by_one_user_are_reverted_but_a_later_change_stays(
    channel: AbstractChannel, topology: Topology, world: World, services: TestServices
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    vandal, colleague, moderator = snowflake(), snowflake(), snowflake()
    general, offtopic = snowflake(), snowflake()
    memories = [
        await world.server_memory(persona, f"fact {number}: movie night is on Fridays")
        for number in range(MEMORIES)
    ]
    others = [await world.server_memory(persona, "the quiz is on Tuesdays") for _ in range(2)]
    await _update(
        channel, topology, persona, [(others[0], "the quiz is on Wednesdays", colleague, general)]
    )
    await _update(
        channel,
        topology,
        persona,
        [
            (
                memory_id,
                f"fact {n}: movie night is cancelled forever",
                vandal,
                (general, offtopic)[n % 2],
            )
            for n, memory_id in enumerate(memories)
        ],
    )
    await _update(
        channel, topology, persona, [(others[1], "the quiz moved online", colleague, offtopic)]
    )
    # The next morning a moderator fixes one of them by hand, through the persona.
    fixed = memories[7]
    await _update(
        channel,
        topology,
        persona,
        [(fixed, "fact 7: movie night is on Saturdays now", moderator, general)],
    )

    listed = await run_ltm(services, "memory", "changes", "--actor", vandal, "--json")
    assert listed.code == 0, listed.stderr
    changes = json.loads(listed.stdout)
    assert sorted(change["memory_id"] for change in changes) == sorted(memories)
    assert {change["channel_id"] for change in changes} == {general, offtopic}
    assert {change["guild_id"] for change in changes} == {server.disc_id}
    assert all("[-on-]{+cancelled+} [-Fridays-]{+forever+}" in change["diff"] for change in changes)

    revert = ("memory", "revert", "--actor", vandal, "--reason", "vandalism, ticket 4312")
    dry = await run_ltm(services, *revert, "--operator", "ann", "--dry-run", "--json")
    assert dry.code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True
    assert sorted(step["memory_id"] for step in plan["reverted"]) == sorted(
        memory_id for memory_id in memories if memory_id != fixed
    )
    assert all(step["revision_id"] is None for step in plan["reverted"])
    assert plan["skipped"] == [
        {"memory_id": fixed, "scope": "server_wide", "why": "changed since by someone else"}
    ]
    assert await world.content(memories[0]) == "fact 0: movie night is cancelled forever"

    async with tap_events(channel, topology.events_exchange, ["memory.#", "operator.#"]) as tap:
        done = await run_ltm(services, *revert, "--operator", "ann", "--yes", "--json")
        assert done.code == 0, done.stderr
        [record] = await tap.wait_for(MemoriesReverted)
        restored = await tap.wait_for(MemoryRestored, MEMORIES - 1)
    result = json.loads(done.stdout)
    assert result["dry_run"] is False
    assert [(s["memory_id"], s["before"], s["after"]) for s in result["reverted"]] == [
        (s["memory_id"], s["before"], s["after"]) for s in plan["reverted"]
    ]
    assert result["skipped"] == plan["skipped"]
    for number, memory_id in enumerate(memories):
        if memory_id != fixed:
            assert await world.content(memory_id) == f"fact {number}: movie night is on Fridays"
    assert await world.content(fixed) == "fact 7: movie night is on Saturdays now"
    assert await world.content(others[0]) == "the quiz is on Wednesdays"
    assert await world.content(others[1]) == "the quiz moved online"
    assert (record.operator, record.reason) == ("operator:ann", "vandalism, ticket 4312")
    assert (record.reverted, record.skipped) == (MEMORIES - 1, 1)
    assert record.filter.actor_disc_id == vandal
    assert {event.actor_id for event in restored} == {"operator:ann"}
    new_revision = (await world.revisions(memories[0]))[-1]
    assert new_revision["reason"] == "vandalism, ticket 4312"

    again = await run_ltm(services, *revert, "--operator", "ann", "--yes", "--json")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout) == {
        "dry_run": False,
        "reverted": [],
        "skipped": plan["skipped"],
    }
    assert len(await world.revisions(memories[0])) == 2
