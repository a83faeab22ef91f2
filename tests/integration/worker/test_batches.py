"""Several calls in one transaction: each decided and answered as if it ran alone."""

from __future__ import annotations

import asyncio
import uuid

from contracts import MemoryStatus, ToolCallRequested
from harness.world import participant
from tests.integration.worker.checks import Pipeline
from worker.batching import CallBatcher
from worker.service import Processed


async def test_a_batch_mixes_scopes_successes_and_failures(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    server_id = await pipeline.server_memory(scene.persona, "server fact")
    owner_id, owner_disc = await world.user()
    await world.member(scene.server, owner_disc, "olive", display_name="Olive")
    personal_id = await pipeline.personal_memory(owner_id, 0, "olive fact")
    doomed_id = await pipeline.server_memory(scene.persona, "to delete")
    olive = participant(owner_disc, "Olive")
    calls = [
        scene.call({"memory_id": server_id, "memory_content": "server fact v2"}),
        scene.call({"memory_id": "nope", "memory_content": "x"}),
        scene.call(
            {"memory_id": personal_id, "memory_content": "olive v2", "target_user": "Olive"}, olive
        ),
        scene.call({"memory_id": 2**40, "memory_content": "x"}),
        scene.call({"memory_id": doomed_id, "memory_content": ""}),
    ]
    results = await pipeline.run_together(calls)

    assert [r.result.status for r in results] == [
        MemoryStatus.UPDATED,
        MemoryStatus.INVALID_ARGS,
        MemoryStatus.UPDATED,
        MemoryStatus.NOT_FOUND,
        MemoryStatus.DELETED,
    ]
    assert [len(r.outbox) for r in results] == [4, 1, 4, 1, 4]
    for call, processed in zip(calls, results, strict=True):
        assert processed.result.tool_call_id == call.tool_call_id
        assert {row.correlation_id for row in processed.outbox} == {call.tool_call_id}
        inbox = await world.inbox(call.tool_call_id)
        assert inbox is not None and inbox["status"] == processed.result.status.value
    assert await world.content(server_id) == "server fact v2"
    assert await world.content(personal_id) == "olive v2"
    assert await world.content(doomed_id) is None
    assert results[2].result.data.target_user == "Olive"


async def test_two_changes_of_one_memory_in_a_batch_chain_in_order(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    calls = [
        scene.call({"memory_id": memory_id, "memory_content": "v1"}),
        scene.call({"memory_id": memory_id, "memory_content": "v2"}),
        scene.call({"memory_id": memory_id, "memory_content": ""}),
        scene.call({"memory_id": memory_id, "memory_content": "v3"}),
    ]
    results = await pipeline.run_together(calls)

    assert [r.result.status for r in results] == [
        MemoryStatus.UPDATED,
        MemoryStatus.UPDATED,
        MemoryStatus.DELETED,
        MemoryStatus.NOT_FOUND,  # deleted by the call before it
    ]
    revisions = await pipeline.world.revisions(memory_id)
    assert [(r["content_before"], r["content_after"]) for r in revisions] == [
        ("v0", "v1"),
        ("v1", "v2"),
        ("v2", None),
    ]
    assert [r["tool_call_id"] for r in revisions] == [c.tool_call_id for c in calls[:3]]
    assert await pipeline.world.content(memory_id) is None


async def test_a_batch_answers_calls_seen_before_from_their_record(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    seen = scene.call({"memory_id": memory_id, "memory_content": "v1"})
    first = await pipeline.run(seen)
    fresh = scene.call({"memory_id": memory_id, "memory_content": "v2"})

    again, new = await pipeline.run_together([seen, fresh])

    assert again.replayed and again.outbox == []
    assert (again.result.status, again.result.message, again.result.data) == (
        first.result.status,
        first.result.message,
        first.result.data,
    )
    assert not new.replayed and new.result.status is MemoryStatus.UPDATED
    assert len(await pipeline.world.revisions(memory_id)) == 2


async def test_a_batch_refuses_a_reused_id_and_answers_the_others_as_alone(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    seen = scene.call({"memory_id": memory_id, "memory_content": "v1"})
    await pipeline.run(seen)
    record = await world.inbox(seen.tool_call_id)
    reused = seen.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "arguments": {"memory_id": memory_id, "memory_content": "v9"},
        }
    )
    fresh = scene.call({"memory_id": memory_id, "memory_content": "v2"})
    failing = scene.call({"memory_id": "nope", "memory_content": "x"})

    refused, new, bad = await pipeline.run_together([reused, fresh, failing])

    assert refused.reused_id and refused.outbox == []
    assert refused.result.status is MemoryStatus.INVALID_ARGS
    assert refused.result.data.reason == "tool_call_id_reused"
    # The others' results and outbox rows are their own, in order.
    assert new.result.status is MemoryStatus.UPDATED
    assert bad.result.status is MemoryStatus.INVALID_ARGS and bad.result.data.reason is None
    assert [len(new.outbox), len(bad.outbox)] == [4, 1]
    assert {row.correlation_id for row in new.outbox} == {fresh.tool_call_id}
    assert {row.correlation_id for row in bad.outbox} == {failing.tool_call_id}
    assert await world.content(memory_id) == "v2"
    revisions = await world.revisions(memory_id)
    assert [r["tool_call_id"] for r in revisions] == [seen.tool_call_id, fresh.tool_call_id]
    assert await world.inbox(seen.tool_call_id) == record
    assert len(await world.outbox_of_call(seen.tool_call_id)) == 4


async def test_two_calls_under_one_id_submitted_together_apply_once_and_refuse_the_other(
    pipeline: Pipeline,
) -> None:
    """The worker's batcher keeps the two in different batches; two batches at a time meet in
    the database, at the inbox row."""
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "v0")
    one = scene.call({"memory_id": memory_id, "memory_content": "one"})
    other = one.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "arguments": {"memory_id": memory_id, "memory_content": "other"},
        }
    )

    batcher: CallBatcher[ToolCallRequested, Processed] = CallBatcher(
        pipeline.run_together,
        max_batch=64,
        concurrency=2,
        shared_fault=lambda error: False,
    )
    try:
        async with asyncio.timeout(20):
            results = await asyncio.gather(
                batcher.submit(one.tool_call_id, one), batcher.submit(other.tool_call_id, other)
            )
    finally:
        await batcher.close()

    applied = [p for p in results if p.result.status is MemoryStatus.UPDATED]
    refused = [p for p in results if p.reused_id]
    assert len(applied) == 1 and len(refused) == 1, [p.result for p in results]
    assert refused[0].result.data.reason == "tool_call_id_reused"
    assert await pipeline.world.content(memory_id) == applied[0].result.data.content_saved
    assert len(await pipeline.world.revisions(memory_id)) == 1
    outbox = await pipeline.world.outbox_of_call(one.tool_call_id)
    assert [row["event_id"] for row in outbox] == [row.event_id for row in applied[0].outbox]
