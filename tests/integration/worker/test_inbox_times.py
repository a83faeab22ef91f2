"""The idempotency record keeps when its call was requested and when it was answered: the
times the console's latency chart is drawn from."""

from __future__ import annotations

from datetime import timedelta

from tests.integration.worker.checks import Pipeline


async def test_the_record_keeps_when_the_call_was_requested_and_when_it_was_answered(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.world.server_memory(scene.persona, "before")
    call = scene.call({"memory_id": memory_id, "memory_content": "after"})
    # Published two seconds before the worker takes it: the wait is part of the latency.
    call = call.model_copy(update={"occurred_at": call.occurred_at - timedelta(seconds=2)})

    await pipeline.run(call)

    row = await pipeline.world.inbox(call.tool_call_id)
    assert row is not None
    assert row["requested_at"] == call.occurred_at
    # The answer's own time, not the transaction's start that received_at holds.
    assert row["completed_at"] > row["received_at"]
    assert row["completed_at"] - row["requested_at"] >= timedelta(seconds=2)
