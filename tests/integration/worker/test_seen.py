"""What the LLM saw (`context.seen`) on the real database: the statement that writes compares
the locked row's `revision_id` with the one the LLM was shown, refuses a stale write with the
memory's text now, and every write keeps the row's `revision_id` its latest revision's id."""

from __future__ import annotations

import asyncio
from typing import Any

from contracts import MemoryStatus, ToolCallRequested
from harness.world import participant
from infra.settings import Settings
from infra.storage.engine import create_engine
from infra.storage.memories import MemoryQueries
from operators.revision_store import RestoredMemory, RevisionStore
from tests.integration.worker.checks import (
    Pipeline,
    Scene,
    assert_failure,
    assert_result,
)

FRIDAYS = "Movie night is on Fridays."
SATURDAYS = "Movie night is on Saturdays."
EIGHT_PM = "Movie night is on Fridays at 8 pm."


def shown(call: ToolCallRequested, seen: dict[int, int]) -> ToolCallRequested:
    """The call, as a bot that rendered these memories at these revisions sends it."""
    context = call.context.model_copy(update={"seen": {str(k): v for k, v in seen.items()}})
    return call.model_copy(update={"context": context})


async def row_revision(pipeline: Pipeline, memory_id: int) -> int | None:
    rows = await pipeline.sql(
        "SELECT revision_id FROM server_memories WHERE server_memory_id = %s"
        " UNION ALL SELECT revision_id FROM personal_memories WHERE personal_memory_id = %s",
        memory_id,
        memory_id,
    )
    return None if not rows else int(rows[0]["revision_id"])


async def latest_revision(pipeline: Pipeline, memory_id: int) -> int:
    return int((await pipeline.world.revisions(memory_id))[-1]["revision_id"])


async def _update(scene: Scene, memory_id: int, content: str, **more: Any) -> ToolCallRequested:
    return scene.call({"memory_id": memory_id, "memory_content": content, **more})


async def test_an_update_built_on_the_current_revision_applies_and_the_row_keeps_its_id(
    pipeline: Pipeline, settings: Settings
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    assert await row_revision(pipeline, memory_id) == 0  # seeded: no revision

    call = shown(await _update(scene, memory_id, SATURDAYS), {memory_id: 0})
    assert_result(await pipeline.run(call), call, MemoryStatus.UPDATED)

    revision = await latest_revision(pipeline, memory_id)
    assert await row_revision(pipeline, memory_id) == revision
    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        server = await MemoryQueries(engine).server(scene.server.disc_id)
    finally:
        await engine.dispose()
    assert server is not None
    [memory] = [m for m in server.memories if m.memory_id == memory_id]
    assert (memory.content, memory.revision_id) == (SATURDAYS, revision)


async def test_an_update_built_on_an_older_revision_is_refused_with_the_text_now(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    first = shown(await _update(scene, memory_id, SATURDAYS), {memory_id: 0})
    assert_result(await pipeline.run(first), first, MemoryStatus.UPDATED)
    current = await latest_revision(pipeline, memory_id)
    before = await pipeline.row(memory_id)

    stale = shown(await _update(scene, memory_id, EIGHT_PM), {memory_id: 0})
    result = await assert_failure(
        pipeline.world,
        await pipeline.run(stale),
        stale,
        MemoryStatus.CONFLICT,
        {
            "scope": "server_wide",
            "memory_id": memory_id,
            "current_revision_id": current,
            "current_content": SATURDAYS,
        },
    )
    assert f'"{SATURDAYS}"' in result.message
    assert await pipeline.row(memory_id) == before
    assert await row_revision(pipeline, memory_id) == current

    # Read back again: the retry is built on the new revision, and applies.
    retry = shown(
        await _update(scene, memory_id, "Movie night is on Saturdays at 8 pm."),
        {memory_id: current},
    )
    assert_result(await pipeline.run(retry), retry, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == "Movie night is on Saturdays at 8 pm."


async def test_a_stale_delete_is_refused_and_a_current_one_removes_the_row(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    changed = await _update(scene, memory_id, SATURDAYS)
    assert_result(await pipeline.run(changed), changed, MemoryStatus.UPDATED)
    current = await latest_revision(pipeline, memory_id)

    stale_delete = shown(await _update(scene, memory_id, ""), {memory_id: 0})
    await assert_failure(
        pipeline.world, await pipeline.run(stale_delete), stale_delete, MemoryStatus.CONFLICT
    )
    assert await pipeline.world.content(memory_id) == SATURDAYS

    delete = shown(await _update(scene, memory_id, ""), {memory_id: current})
    assert_result(await pipeline.run(delete), delete, MemoryStatus.DELETED)
    assert await pipeline.row(memory_id) is None
    assert await row_revision(pipeline, memory_id) is None


async def test_a_shown_memory_deleted_since_is_said_so(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    delete = await _update(scene, memory_id, "")
    assert_result(await pipeline.run(delete), delete, MemoryStatus.DELETED)

    late = shown(await _update(scene, memory_id, EIGHT_PM), {memory_id: 0})
    result = await assert_failure(
        pipeline.world,
        await pipeline.run(late),
        late,
        MemoryStatus.NOT_FOUND,
        {"scope": "server_wide", "memory_id": memory_id, "reason": "deleted_since_shown"},
    )
    assert "deleted since it was shown" in result.message


async def test_a_personal_memory_is_compared_too(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    alice_user_id, alice = await pipeline.world.user()
    await pipeline.world.member(scene.server, alice, "alice_w", display_name="Alice")
    memory_id = await pipeline.personal_memory(alice_user_id, scene.persona.lineage, "p0")
    alice_here = participant(alice, "Alice")
    first = scene.call(
        {"memory_id": memory_id, "memory_content": "p1", "target_user": "Alice"}, alice_here
    )
    assert_result(await pipeline.run(first), first, MemoryStatus.UPDATED)
    current = await latest_revision(pipeline, memory_id)
    assert await row_revision(pipeline, memory_id) == current

    stale = shown(
        scene.call(
            {"memory_id": memory_id, "memory_content": "p2", "target_user": "Alice"}, alice_here
        ),
        {memory_id: 0},
    )
    result = await assert_failure(
        pipeline.world, await pipeline.run(stale), stale, MemoryStatus.CONFLICT
    )
    assert (result.data.current_revision_id, result.data.current_content) == (current, "p1")
    assert result.data.target_user is not None and "Alice" in result.message
    assert await pipeline.world.content(memory_id) == "p1"


async def test_the_edit_policy_is_decided_first_and_shows_nothing(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    await pipeline.world.set_edit_policy(scene.server, "teacher_or_manager")
    alice_user_id, _ = await pipeline.world.user()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS, teacher=alice_user_id)
    await pipeline.sql(
        "UPDATE server_memories SET revision_id = 5 WHERE server_memory_id = %s", memory_id
    )

    stale = shown(await _update(scene, memory_id, EIGHT_PM), {memory_id: 0})
    result = await assert_failure(
        pipeline.world, await pipeline.run(stale), stale, MemoryStatus.FORBIDDEN
    )
    assert result.data.current_content is None and FRIDAYS not in result.message


async def test_a_call_without_seen_or_not_showing_the_memory_writes_as_before(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    await pipeline.sql(
        "UPDATE server_memories SET revision_id = 5 WHERE server_memory_id = %s", memory_id
    )
    plain = await _update(scene, memory_id, SATURDAYS)
    assert_result(await pipeline.run(plain), plain, MemoryStatus.UPDATED)
    other = shown(await _update(scene, memory_id, EIGHT_PM), {memory_id + 1_000_000: 0})
    assert_result(await pipeline.run(other), other, MemoryStatus.UPDATED)
    assert await pipeline.world.content(memory_id) == EIGHT_PM


async def test_a_redelivered_refusal_repeats_its_answer(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    changed = await _update(scene, memory_id, SATURDAYS)
    assert_result(await pipeline.run(changed), changed, MemoryStatus.UPDATED)
    stale = shown(await _update(scene, memory_id, EIGHT_PM), {memory_id: 0})
    first = await pipeline.run(stale)
    assert first.result.status is MemoryStatus.CONFLICT

    # The memory is changed again, and the call comes back: its stored answer, nothing new.
    again = shown(await _update(scene, memory_id, "later"), {})
    assert_result(await pipeline.run(again), again, MemoryStatus.UPDATED)
    repeated = await pipeline.run(stale)
    assert repeated.replayed
    assert (repeated.result.status, repeated.result.message, repeated.result.data) == (
        first.result.status,
        first.result.message,
        first.result.data,
    )
    assert await pipeline.world.content(memory_id) == "later"


async def test_two_updates_built_on_one_revision_in_one_batch_apply_once(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    calls = [
        shown(await _update(scene, memory_id, content), {memory_id: 0})
        for content in (SATURDAYS, EIGHT_PM)
    ]
    first, second = await pipeline.run_together(calls)
    assert first.result.status is MemoryStatus.UPDATED
    assert second.result.status is MemoryStatus.CONFLICT
    assert second.result.data.current_content == SATURDAYS
    assert await pipeline.world.content(memory_id) == SATURDAYS


async def test_two_transactions_racing_on_one_revision_apply_once(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    calls = [
        shown(await _update(scene, memory_id, f"version {n}"), {memory_id: 0}) for n in range(4)
    ]
    outcomes = await asyncio.gather(*(pipeline.run(call) for call in calls))

    statuses = sorted(processed.result.status.value for processed in outcomes)
    assert statuses == [MemoryStatus.CONFLICT.value] * 3 + [MemoryStatus.UPDATED.value]
    [applied] = [p for p in outcomes if p.result.status is MemoryStatus.UPDATED]
    assert await pipeline.world.content(memory_id) == applied.result.data.content_saved
    assert len(await pipeline.world.revisions(memory_id)) == 1


async def test_a_created_memory_carries_its_created_revision(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    call = scene.create({"memory_content": "Quiz on Mondays.", "memory_scope": "server_wide"})
    processed = await pipeline.run(call)
    assert processed.result.status is MemoryStatus.SAVED
    memory_id = processed.result.data.memory_id
    assert memory_id is not None
    [created] = await pipeline.world.revisions(memory_id)
    assert await row_revision(pipeline, memory_id) == created["revision_id"]


async def test_a_restore_sets_the_row_revision(pipeline: Pipeline, settings: Settings) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, FRIDAYS)
    update = await _update(scene, memory_id, SATURDAYS)
    assert_result(await pipeline.run(update), update, MemoryStatus.UPDATED)
    delete = await _update(scene, memory_id, "")
    assert_result(await pipeline.run(delete), delete, MemoryStatus.DELETED)
    updated, _deleted = await pipeline.world.revisions(memory_id)

    engine = create_engine(settings.sqlalchemy_url, pool_size=1)
    try:
        store = RevisionStore(engine)
        # Before the update: Fridays again, the deleted row re-created under its id.
        async with store.restoring(
            int(updated["revision_id"]), actor="cli", tool_call_id=f"restore:{memory_id}:a"
        ) as (restored, _):
            assert isinstance(restored, RestoredMemory)
    finally:
        await engine.dispose()
    assert await pipeline.world.content(memory_id) == FRIDAYS
    assert await row_revision(pipeline, memory_id) == restored.revision.revision_id
    assert await row_revision(pipeline, memory_id) == await latest_revision(pipeline, memory_id)
