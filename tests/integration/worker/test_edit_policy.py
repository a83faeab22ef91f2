"""Who may change whose memory (`server_configs.memory_edit_policy`) on the real database.

Under `teacher_or_manager` the statement that matches and writes also checks the row's
teacher or owner: a memory in scope that the triggerer may not change is answered
`memory_update_failed_forbidden` and left exactly as it was; an id out of scope stays
`memory_update_failed_not_found`.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts import MemoryStatus, ToolCallRequested
from harness.snowflake import snowflake
from harness.world import participant, tool_call
from tests.integration.worker.checks import (
    MAX_MEMORY_LENGTH,
    REPLY_TTL_MS,
    Pipeline,
    Scene,
    assert_failure,
    assert_result,
    assert_success_events,
    single_revision,
)
from worker.service import Processed, process_tool_calls

RESTRICTED = "teacher_or_manager"


async def _restricted_guild(pipeline: Pipeline) -> Scene:
    scene = await pipeline.guild()
    await pipeline.world.set_edit_policy(scene.server, RESTRICTED)
    return scene


async def _other_member(pipeline: Pipeline, scene: Scene) -> tuple[int, str]:
    """Alice: a current member with a `users` row, who is not the triggerer."""
    user_id, disc_id = await pipeline.world.user()
    await pipeline.world.member(scene.server, disc_id, "alice_w", display_name="Alice")
    return user_id, disc_id


async def _assert_forbidden(pipeline: Pipeline, call: ToolCallRequested, memory_id: int) -> None:
    """Answered and recorded as forbidden, with only the result queued and the row as it was."""
    before = await pipeline.row(memory_id)
    history = await pipeline.world.revisions(memory_id)
    processed = await pipeline.run(call)
    result = await assert_failure(pipeline.world, processed, call, MemoryStatus.FORBIDDEN)
    assert await pipeline.row(memory_id) == before
    assert await pipeline.world.revisions(memory_id) == history
    assert f"ID:{memory_id}" in result.message
    assert "manages this server" in result.message
    assert result.data.memory_id == memory_id
    assert result.data.content_saved is None and result.data.content_deleted is None


async def test_anyone_is_the_default_and_lets_anybody_change_any_memory(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()  # no server_configs row
    alice_user_id, alice = await _other_member(pipeline, scene)
    taught_by_alice = await pipeline.server_memory(scene.persona, "v0", teacher=alice_user_id)
    about_alice = await pipeline.personal_memory(alice_user_id, 0, "p0")
    server_call = scene.call({"memory_id": taught_by_alice, "memory_content": "v1"})
    personal_call = scene.call(
        {"memory_id": about_alice, "memory_content": "", "target_user": "Alice"},
        participant(alice, "Alice"),
    )

    assert_result(await pipeline.run(server_call), server_call, MemoryStatus.UPDATED)
    assert_result(await pipeline.run(personal_call), personal_call, MemoryStatus.DELETED)

    assert await pipeline.world.content(taught_by_alice) == "v1"
    assert await pipeline.world.content(about_alice) is None
    rows = await pipeline.sql(
        "SELECT memory_edit_policy FROM server_configs WHERE server_id = %s",
        scene.server.server_id,
    )
    assert rows == []


async def test_an_explicit_anyone_lets_anybody_change_any_memory(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    await pipeline.world.set_edit_policy(scene.server, "anyone")
    alice_user_id, _ = await _other_member(pipeline, scene)
    memory_id = await pipeline.server_memory(scene.persona, "v0", teacher=alice_user_id)
    call = scene.call({"memory_id": memory_id, "memory_content": "v1"})

    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "v1"


@pytest.mark.parametrize("content", ["taught again", ""], ids=["update", "delete"])
async def test_the_teacher_may_change_a_server_memory(pipeline: Pipeline, content: str) -> None:
    scene = await _restricted_guild(pipeline)
    memory_id = await pipeline.server_memory(
        scene.persona, "taught", teacher=scene.triggerer_user_id
    )
    call = scene.call({"memory_id": memory_id, "memory_content": content})

    processed = await pipeline.run(call)

    status = MemoryStatus.UPDATED if content else MemoryStatus.DELETED
    assert_result(processed, call, status)
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="server_wide",
        action="updated" if content else "deleted",
        before="taught",
        after=content or None,
        server_id=scene.server.server_id,
        owner_user_id=None,
        lineage=scene.persona.lineage,
    )
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="persona_state",
        cache_key=scene.server.disc_id,
    )


@pytest.mark.parametrize("content", ["not mine to change", ""], ids=["update", "delete"])
async def test_someone_else_may_not_change_a_server_memory(
    pipeline: Pipeline, content: str
) -> None:
    scene = await _restricted_guild(pipeline)
    alice_user_id, _ = await _other_member(pipeline, scene)
    memory_id = await pipeline.server_memory(scene.persona, "alice taught", teacher=alice_user_id)
    call = scene.call({"memory_id": memory_id, "memory_content": content})

    await _assert_forbidden(pipeline, call, memory_id)

    result = (await pipeline.world.inbox(call.tool_call_id) or {})["result"]
    assert "taught it" in result["message"]
    assert "alice taught" not in result["message"]
    assert result["data"] == {"scope": "server_wide", "memory_id": memory_id}


async def test_a_memory_nobody_taught_is_not_the_triggerers(pipeline: Pipeline) -> None:
    scene = await _restricted_guild(pipeline)
    memory_id = await pipeline.server_memory(scene.persona, "untaught", teacher=None)
    call = scene.call({"memory_id": memory_id, "memory_content": "mine now"})

    await _assert_forbidden(pipeline, call, memory_id)


async def test_a_triggerer_with_no_users_row_taught_nothing(pipeline: Pipeline) -> None:
    """No `users` row and no teacher: both unknown, which is no match."""
    scene = await _restricted_guild(pipeline)
    memory_id = await pipeline.server_memory(scene.persona, "untaught", teacher=None)
    stranger = snowflake()
    call = tool_call(
        scene.persona,
        {"memory_id": memory_id, "memory_content": "mine now"},
        triggerer_id=stranger,
        participants=(participant(stranger, "Stranger"),),
    )

    await _assert_forbidden(pipeline, call, memory_id)


@pytest.mark.parametrize("teacher", ["alice", "nobody"])
async def test_a_manager_may_change_any_server_memory(pipeline: Pipeline, teacher: str) -> None:
    scene = await _restricted_guild(pipeline)
    alice_user_id, _ = await _other_member(pipeline, scene)
    memory_id = await pipeline.server_memory(
        scene.persona, "v0", teacher=alice_user_id if teacher == "alice" else None
    )
    call = scene.call({"memory_id": memory_id, "memory_content": "v1"}, triggerer_is_manager=True)

    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "v1"
    assert len(await pipeline.world.revisions(memory_id)) == 1


@pytest.mark.parametrize("lineage", ["persona", "global"])
async def test_the_owner_may_change_a_personal_memory(pipeline: Pipeline, lineage: str) -> None:
    scene = await _restricted_guild(pipeline)
    memory_id = await pipeline.personal_memory(
        scene.triggerer_user_id, scene.persona.lineage if lineage == "persona" else 0, "mine"
    )
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "still mine", "target_user": "Trig"}
    )

    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "still mine"


@pytest.mark.parametrize("content", ["rewritten by someone else", ""], ids=["update", "delete"])
async def test_someone_else_may_not_change_a_personal_memory(
    pipeline: Pipeline, content: str
) -> None:
    scene = await _restricted_guild(pipeline)
    alice_user_id, alice = await _other_member(pipeline, scene)
    memory_id = await pipeline.personal_memory(alice_user_id, 0, "alice's own")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": content, "target_user": "Alice"},
        participant(alice, "Alice"),
    )

    await _assert_forbidden(pipeline, call, memory_id)

    result = (await pipeline.world.inbox(call.tool_call_id) or {})["result"]
    assert 'only by "Alice"' in result["message"]
    assert "alice's own" not in result["message"]
    assert result["data"] == {
        "scope": "target_user",
        "memory_id": memory_id,
        "target_user": "Alice",
    }


async def test_a_manager_may_change_a_personal_memory_of_someone_else(
    pipeline: Pipeline,
) -> None:
    scene = await _restricted_guild(pipeline)
    alice_user_id, alice = await _other_member(pipeline, scene)
    memory_id = await pipeline.personal_memory(alice_user_id, scene.persona.lineage, "p0")
    call = scene.call(
        {"memory_id": memory_id, "memory_content": "", "target_user": "Alice"},
        participant(alice, "Alice"),
        triggerer_is_manager=True,
    )

    processed = await pipeline.run(call)

    assert_result(processed, call, MemoryStatus.DELETED)
    revision = await single_revision(
        pipeline.world,
        call,
        memory_id=memory_id,
        scope="target_user",
        action="deleted",
        before="p0",
        after=None,
        server_id=scene.server.server_id,
        owner_user_id=alice_user_id,
        lineage=scene.persona.lineage,
    )
    await assert_success_events(
        pipeline.world,
        processed,
        call,
        revision=revision,
        cache="user",
        cache_key=alice,
        owner_id=alice,
    )


@pytest.mark.parametrize("personal", [False, True], ids=["server", "personal"])
async def test_in_a_dm_the_triggerer_manages_its_own_dm(pipeline: Pipeline, personal: bool) -> None:
    scene = await pipeline.dm()
    await pipeline.world.set_edit_policy(scene.server, RESTRICTED)
    if personal:
        memory_id = await pipeline.personal_memory(scene.triggerer_user_id, 0, "v0")
        arguments = {"memory_id": memory_id, "memory_content": "v1", "target_user": "Trig"}
    else:
        # Taught by nobody: allowed only because the triggerer manages this DM.
        memory_id = await pipeline.server_memory(scene.persona, "v0", teacher=None)
        arguments = {"memory_id": memory_id, "memory_content": "v1"}
    call = scene.call(arguments)

    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "v1"


async def test_an_id_out_of_scope_stays_not_found(pipeline: Pipeline) -> None:
    """Forbidden tells that a memory is there: only for memories this call could reach."""
    scene = await _restricted_guild(pipeline)
    other = await pipeline.guild()
    elsewhere = await pipeline.server_memory(other.persona, "another server's")
    other_lineage = await pipeline.server_memory(
        scene.persona, "another persona's", lineage=pipeline.world.new_lineage()
    )
    for memory_id in (elsewhere, other_lineage, 2**40):
        call = scene.call({"memory_id": memory_id, "memory_content": "x"})
        result = await assert_failure(
            pipeline.world, await pipeline.run(call), call, MemoryStatus.NOT_FOUND
        )
        assert "another" not in result.message
    assert await pipeline.world.content(elsewhere) == "another server's"
    assert await pipeline.world.content(other_lineage) == "another persona's"


async def test_an_id_of_the_other_scope_stays_not_found_with_its_hint(pipeline: Pipeline) -> None:
    scene = await _restricted_guild(pipeline)
    alice_user_id, alice = await _other_member(pipeline, scene)
    personal_id = await pipeline.personal_memory(alice_user_id, 0, "about alice")
    server_id = await pipeline.server_memory(scene.persona, "of the server", teacher=None)

    as_server = scene.call({"memory_id": personal_id, "memory_content": "x"})
    server_result = await assert_failure(
        pipeline.world, await pipeline.run(as_server), as_server, MemoryStatus.NOT_FOUND
    )
    assert "target_user" in server_result.message

    as_personal = scene.call(
        {"memory_id": server_id, "memory_content": "x", "target_user": "Alice"},
        participant(alice, "Alice"),
    )
    personal_result = await assert_failure(
        pipeline.world, await pipeline.run(as_personal), as_personal, MemoryStatus.NOT_FOUND
    )
    assert "without target_user" in personal_result.message
    assert await pipeline.world.content(personal_id) == "about alice"
    assert await pipeline.world.content(server_id) == "of the server"


async def test_a_forbidden_call_delivered_again_repeats_its_stored_answer(
    pipeline: Pipeline,
) -> None:
    """The record answers a redelivery, even once the policy allows the change."""
    scene = await _restricted_guild(pipeline)
    memory_id = await pipeline.server_memory(scene.persona, "v0", teacher=None)
    call = scene.call({"memory_id": memory_id, "memory_content": "v1"})
    first = await pipeline.run(call)
    assert first.result.status is MemoryStatus.FORBIDDEN

    await pipeline.world.set_edit_policy(scene.server, "anyone")
    again = await pipeline.run(call)

    assert again.replayed and again.outbox == []
    assert (again.result.status, again.result.message, again.result.data) == (
        first.result.status,
        first.result.message,
        first.result.data,
    )
    assert await pipeline.world.content(memory_id) == "v0"
    assert await pipeline.world.revisions(memory_id) == []
    fresh = scene.call({"memory_id": memory_id, "memory_content": "v1"})
    assert_result(await pipeline.run(fresh), fresh, MemoryStatus.UPDATED)


async def test_the_policy_is_read_at_processing_time(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0", teacher=None)
    allowed = scene.call({"memory_id": memory_id, "memory_content": "v1"})
    assert_result(await pipeline.run(allowed), allowed, MemoryStatus.UPDATED)

    await pipeline.world.set_edit_policy(scene.server, RESTRICTED)
    refused = scene.call({"memory_id": memory_id, "memory_content": "v2"})
    await _assert_forbidden(pipeline, refused, memory_id)
    assert await pipeline.world.content(memory_id) == "v1"


async def _run_together(pipeline: Pipeline, calls: list[ToolCallRequested]) -> list[Processed]:
    async with pipeline.store.transaction() as tx:
        return await process_tool_calls(
            calls, tx, max_memory_length=MAX_MEMORY_LENGTH, reply_ttl_ms=REPLY_TTL_MS
        )


async def test_a_batch_refuses_and_applies_each_call_on_its_own(pipeline: Pipeline) -> None:
    """One transaction, several statements (a memory changed twice goes in the next wave)."""
    scene = await _restricted_guild(pipeline)
    world = pipeline.world
    alice_user_id, alice = await _other_member(pipeline, scene)
    alices = await pipeline.server_memory(scene.persona, "x0", teacher=alice_user_id)
    mine = await pipeline.server_memory(scene.persona, "y0", teacher=scene.triggerer_user_id)
    about_alice = await pipeline.personal_memory(alice_user_id, 0, "p0")

    def change(memory_id: int, content: str, **extra: Any) -> ToolCallRequested:
        return scene.call({"memory_id": memory_id, "memory_content": content}, **extra)

    calls = [
        change(alices, "x1"),
        change(mine, "y1"),
        change(alices, "x2", triggerer_is_manager=True),
        change(alices, "x3"),
        change(2**40, "z"),
        scene.call(
            {"memory_id": about_alice, "memory_content": "", "target_user": "Alice"},
            participant(alice, "Alice"),
        ),
        change(mine, ""),
    ]

    results = await _run_together(pipeline, calls)

    assert [r.result.status for r in results] == [
        MemoryStatus.FORBIDDEN,
        MemoryStatus.UPDATED,
        MemoryStatus.UPDATED,
        MemoryStatus.FORBIDDEN,
        MemoryStatus.NOT_FOUND,
        MemoryStatus.FORBIDDEN,
        MemoryStatus.DELETED,
    ]
    assert [len(r.outbox) for r in results] == [1, 4, 4, 1, 1, 1, 4]
    for call, processed in zip(calls, results, strict=True):
        inbox = await world.inbox(call.tool_call_id)
        assert inbox is not None and inbox["status"] == processed.result.status.value
    revisions = await world.revisions(alices)
    assert [(r["content_before"], r["content_after"], r["tool_call_id"]) for r in revisions] == [
        ("x0", "x2", calls[2].tool_call_id)
    ]
    assert [(r["content_before"], r["content_after"]) for r in await world.revisions(mine)] == [
        ("y0", "y1"),
        ("y1", None),
    ]
    assert await world.content(alices) == "x2"
    assert await world.content(mine) is None
    assert await world.content(about_alice) == "p0"
    assert await world.revisions(about_alice) == []
