"""The edit policy through the broker and a real worker: who may change whose memory.

Each case publishes one call and waits for what the worker emits: an allowed change sends its
result, embed, invalidation and audit event; a refused one only its result, with nothing
written but the answer's record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
from aio_pika.abc import AbstractChannel

from contracts import (
    CacheInvalidate,
    EmbedRequested,
    MemoryChanged,
    MemoryStatus,
    ToolCallCompleted,
    Topology,
)
from harness.broker import publish_tool_call, tap_events
from harness.snowflake import snowflake
from harness.world import World, participant, tool_call

pytestmark = pytest.mark.usefixtures("worker_process")

Policy = Literal["anyone", "teacher_or_manager"] | None  # None: no server_configs row
Memory = Literal["taught_by_triggerer", "taught_by_other", "untaught", "own", "others", "absent"]


@dataclass(frozen=True)
class Case:
    policy: Policy
    memory: Memory
    status: MemoryStatus
    manager: bool = False
    dm: bool = False
    delete: bool = False


CASES = {
    "default_anyone_other_teacher": Case(None, "taught_by_other", MemoryStatus.UPDATED),
    "anyone_others_personal": Case("anyone", "others", MemoryStatus.UPDATED),
    "teacher": Case("teacher_or_manager", "taught_by_triggerer", MemoryStatus.UPDATED),
    "teacher_deletes": Case(
        "teacher_or_manager", "taught_by_triggerer", MemoryStatus.DELETED, delete=True
    ),
    "non_teacher": Case("teacher_or_manager", "taught_by_other", MemoryStatus.FORBIDDEN),
    "non_teacher_deletes": Case(
        "teacher_or_manager", "taught_by_other", MemoryStatus.FORBIDDEN, delete=True
    ),
    "untaught": Case("teacher_or_manager", "untaught", MemoryStatus.FORBIDDEN),
    "manager": Case("teacher_or_manager", "taught_by_other", MemoryStatus.UPDATED, manager=True),
    "owner": Case("teacher_or_manager", "own", MemoryStatus.UPDATED),
    "non_owner": Case("teacher_or_manager", "others", MemoryStatus.FORBIDDEN),
    "non_owner_deletes": Case("teacher_or_manager", "others", MemoryStatus.FORBIDDEN, delete=True),
    "manager_of_others": Case(
        "teacher_or_manager", "others", MemoryStatus.DELETED, manager=True, delete=True
    ),
    "dm_untaught": Case("teacher_or_manager", "untaught", MemoryStatus.UPDATED, dm=True),
    "dm_owner": Case("teacher_or_manager", "own", MemoryStatus.UPDATED, dm=True),
    "out_of_scope": Case("teacher_or_manager", "absent", MemoryStatus.NOT_FOUND),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_who_may_change_whose_memory(
    channel: AbstractChannel, topology: Topology, world: World, case: Case
) -> None:
    triggerer_user_id, triggerer = await world.user()
    server = await world.server(triggerer if case.dm else None, is_dm=case.dm)
    if case.policy is not None:
        await world.set_edit_policy(server, case.policy)
    persona = await world.persona(server)
    other_user_id, other = await world.user()
    participants = [participant(triggerer, "Bob")]
    if not case.dm:
        participants.append(participant(other, "Carol"))
    arguments: dict[str, object] = {"memory_content": "" if case.delete else "changed"}
    if case.memory in ("own", "others"):
        owner_user_id = triggerer_user_id if case.memory == "own" else other_user_id
        memory_id = await world.personal_memory(owner_user_id, persona.lineage, "kept")
        arguments["target_user"] = "Bob" if case.memory == "own" else "Carol"
    else:
        teacher = {"taught_by_triggerer": triggerer_user_id, "taught_by_other": other_user_id}
        memory_id = await world.server_memory(persona, "kept")
        await world.execute(
            "UPDATE server_memories SET user_id = %s WHERE server_memory_id = %s",
            teacher.get(case.memory),
            memory_id,
        )
        if case.memory == "absent":
            # In the persona's lineage, but of another server: out of this call's scope.
            elsewhere = await world.persona(await world.server(), lineage=persona.lineage)
            memory_id = await world.server_memory(elsewhere, "kept")
    arguments["memory_id"] = memory_id
    call = tool_call(
        persona,
        arguments,
        triggerer_id=triggerer,
        participants=tuple(participants),
        triggerer_is_manager=case.manager,
    )

    async with tap_events(channel, topology.events_exchange) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
        if result.success:
            await tap.wait_for(MemoryChanged, tool_call_id=call.tool_call_id)
            await tap.wait_for(CacheInvalidate, tool_call_id=call.tool_call_id)
            await tap.wait_for(EmbedRequested, tool_call_id=call.tool_call_id)

    assert result.status is case.status, result.message
    revisions = await world.revisions_of_call(call.tool_call_id)
    outbox = [row["event_type"] for row in await world.outbox_of_call(call.tool_call_id)]
    if result.success:
        assert len(revisions) == 1
        assert sorted(outbox) == sorted(
            [
                "tool_call.completed",
                "embed.requested",
                "cache.invalidate",
                "memory.deleted" if case.delete else "memory.updated",
            ]
        )
        assert await world.content(memory_id) == (None if case.delete else "changed")
        return
    # Refused: the answer alone, committed with its record; the memory as it was.
    assert revisions == []
    assert outbox == ["tool_call.completed"]
    assert [d.routing_key for d in tap.deliveries_with(correlation_id=call.tool_call_id)] == [
        "result.shard.0"
    ]
    assert (await world.inbox(call.tool_call_id) or {}).get("status") == case.status.value
    assert await world.content(memory_id) == "kept"
    assert "kept" not in result.message
    if case.status is MemoryStatus.FORBIDDEN:
        assert "manages this server" in result.message
        assert result.data.memory_id == memory_id


async def test_a_stranger_to_the_users_table_taught_nothing(
    channel: AbstractChannel, topology: Topology, world: World
) -> None:
    server = await world.server()
    await world.set_edit_policy(server, "teacher_or_manager")
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "kept")  # no teacher
    stranger = snowflake()  # no users row
    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "mine"}, triggerer_id=stranger
    )
    async with tap_events(channel, topology.events_exchange, ["result.#"]) as tap:
        await publish_tool_call(channel, topology, call)
        [result] = await tap.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert result.status is MemoryStatus.FORBIDDEN
    assert await world.content(memory_id) == "kept"
