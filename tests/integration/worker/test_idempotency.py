"""A second delivery of a tool_call_id changes nothing and answers the stored result again;
a different call under a used id is refused and changes nothing either."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import pytest

from contracts import MemoryStatus, ToolCallCompleted, ToolCallRequested
from harness.snowflake import snowflake
from harness.world import participant
from infra.storage.engine import named_cursor
from tests.integration.worker.checks import Pipeline, Scene, assert_result
from worker.adapters.inbox import PostgresInbox
from worker.adapters.memory_store import MemoryStore, PostgresUnitOfWork
from worker.core.idempotency import call_fingerprint
from worker.core.outgoing import UNTRACED, OutboxRow, OutgoingEvent, Traceparents
from worker.service import Processed


class Crash(Exception):
    pass


class _CrashingInbox(PostgresInbox):
    async def finish(
        self, results: Sequence[ToolCallCompleted], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        await super().finish(results, events)
        raise Crash("the worker died before the commit")


class CrashingStore(MemoryStore):
    """The real store, whose transactions fail after the last statement, before the commit."""

    @asynccontextmanager
    async def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AsyncIterator[PostgresUnitOfWork]:
        async with self.driver_transaction() as connection:
            tx = PostgresUnitOfWork(connection, traceparents)
            tx.inbox = _CrashingInbox(named_cursor(connection), traceparents or UNTRACED)
            yield tx


def another_copy(call: ToolCallRequested, **context: Any) -> ToolCallRequested:
    """The same tool call delivered again: a new event, possibly from elsewhere."""
    return call.model_copy(
        update={"event_id": uuid.uuid4(), "context": call.context.model_copy(update=context)}
    )


async def assert_replayed(
    pipeline: Pipeline, first: Processed, call: ToolCallRequested, again: ToolCallRequested
) -> None:
    """`again` answered `first`'s result, routed as `call` was, and nothing else happened."""
    world = pipeline.world
    outbox = await world.outbox_of_call(call.tool_call_id)
    revisions = await world.revisions_of_call(call.tool_call_id)
    inbox = await world.inbox(call.tool_call_id)

    second = await pipeline.run(again)

    assert second.replayed
    assert not first.replayed
    assert second.outbox == []
    # The same answer, to the shard and channel of the original call.
    replay = assert_result(second, call, first.result.status)
    assert (replay.message, replay.data) == (first.result.message, first.result.data)
    assert replay.event_id != first.result.event_id
    assert replay.causation_id == again.event_id
    assert await world.outbox_of_call(call.tool_call_id) == outbox
    assert await world.revisions_of_call(call.tool_call_id) == revisions
    assert await world.inbox(call.tool_call_id) == inbox


@pytest.mark.parametrize("scope", ["server_wide", "target_user"])
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_a_success_is_applied_once(
    pipeline: Pipeline, scope: Literal["server_wide", "target_user"], action: str
) -> None:
    scene = await pipeline.guild()
    if scope == "server_wide":
        memory_id = await pipeline.server_memory(scene.persona, "first")
        arguments: dict[str, Any] = {"memory_id": memory_id}
    else:
        memory_id = await pipeline.personal_memory(scene.triggerer_user_id, 0, "first")
        arguments = {"memory_id": memory_id, "target_user": "Trig"}
    call = scene.call({**arguments, "memory_content": "second" if action == "update" else ""})
    first = await pipeline.run(call)
    assert first.result.success
    row = await pipeline.row(memory_id)

    # Another copy, from another shard and bot process, which sees the conversation's
    # people differently: still the same call (tool, arguments, guild, channel, triggerer
    # and persona are).
    again = another_copy(
        call,
        shard_id=7,
        bot_user_id=snowflake(),
        participants=(participant(scene.triggerer, "Someone else"),),
    )
    await assert_replayed(pipeline, first, call, again)

    assert await pipeline.row(memory_id) == row
    assert len(await pipeline.world.revisions(memory_id)) == 1


async def test_a_replay_after_the_memory_changed_again_does_not_undo_it(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "one")
    call = scene.call({"memory_id": memory_id, "memory_content": "two"})
    first = await pipeline.run(call)
    later = scene.call({"memory_id": memory_id, "memory_content": "three"})
    assert_result(await pipeline.run(later), later, MemoryStatus.UPDATED)

    await assert_replayed(pipeline, first, call, another_copy(call))

    assert await pipeline.world.content(memory_id) == "three"
    assert [r["content_after"] for r in await pipeline.world.revisions(memory_id)] == [
        "two",
        "three",
    ]


Failure = Literal["invalid_args", "not_found_hint", "ambiguous", "privacy_lifted"]


@pytest.mark.parametrize(
    "failure", ["invalid_args", "not_found_hint", "ambiguous", "privacy_lifted"]
)
async def test_a_stored_failure_is_answered_again(pipeline: Pipeline, failure: Failure) -> None:
    scene: Scene = await pipeline.guild()
    world = pipeline.world
    alice_user_id, alice = await world.user(privacy_level=2)
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    memory_id = await pipeline.personal_memory(alice_user_id, 0, "kept")
    if failure == "invalid_args":
        call = scene.call({"memory_id": str(memory_id), "memory_content": "x"})
        status = MemoryStatus.INVALID_ARGS
    elif failure == "not_found_hint":
        call = scene.call({"memory_id": memory_id, "memory_content": "x"})
        status = MemoryStatus.NOT_FOUND
    elif failure == "ambiguous":
        call = scene.call(
            {"memory_id": memory_id, "memory_content": "x", "target_user": "Al"},
            participant(alice, "Al", label="Alice (@alice_w)"),
            participant(snowflake(), "Al", label="Al (@al)"),
        )
        status = MemoryStatus.AMBIGUOUS_USER
    else:
        call = scene.call({"memory_id": memory_id, "memory_content": "x", "target_user": "Alice"})
        status = MemoryStatus.PRIVACY_RESTRICTED
    first = await pipeline.run(call)
    assert_result(first, call, status)
    if failure == "ambiguous":
        assert first.result.data.candidates == ("Al (@al)", "Alice (@alice_w)")
    # What made the first answer a failure is gone by now: the answer stays the stored one.
    await pipeline.sql("UPDATE users SET privacy_level = 0 WHERE user_id = %s", alice_user_id)

    await assert_replayed(pipeline, first, call, another_copy(call))

    assert await world.content(memory_id) == "kept"
    assert await world.revisions(memory_id) == []


async def test_a_call_that_did_not_commit_leaves_nothing_and_its_redelivery_applies(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    memory_id = await pipeline.server_memory(scene.persona, "before")
    call = scene.call({"memory_id": memory_id, "memory_content": "after"})

    with pytest.raises(Crash):
        await pipeline.run(call, store=CrashingStore(pipeline.store.engine))

    # Rolled back whole: no write, no revision, no events, no idempotency record.
    assert await world.content(memory_id) == "before"
    assert await world.revisions(memory_id) == []
    assert await world.outbox_of_call(call.tool_call_id) == []
    assert await world.inbox(call.tool_call_id) is None

    redelivered = await pipeline.run(another_copy(call))

    assert not redelivered.replayed
    assert_result(redelivered, call, MemoryStatus.UPDATED)
    assert await world.content(memory_id) == "after"
    assert len(await world.revisions_of_call(call.tool_call_id)) == 1
    assert len(await world.outbox_of_call(call.tool_call_id)) == 4


Different = Literal[
    "content", "delete", "memory_id", "target_user", "guild", "channel", "triggerer", "persona"
]


@pytest.mark.parametrize(
    "different",
    ["content", "delete", "memory_id", "target_user", "guild", "channel", "triggerer", "persona"],
)
async def test_a_different_call_under_a_used_id_is_refused_and_changes_nothing(
    pipeline: Pipeline, different: Different
) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    memory_id = await pipeline.server_memory(scene.persona, "first")
    other_memory_id = await pipeline.server_memory(scene.persona, "other")
    personal_id = await pipeline.personal_memory(scene.triggerer_user_id, 0, "personal")
    arguments = {"memory_id": memory_id, "memory_content": "second"}
    call = scene.call(arguments)
    first = await pipeline.run(call)
    assert_result(first, call, MemoryStatus.UPDATED)
    inbox = await world.inbox(call.tool_call_id)
    assert inbox is not None and inbox["fingerprint"] == call_fingerprint(call)
    rows = [await pipeline.row(memory) for memory in (memory_id, other_memory_id, personal_id)]
    outbox = await world.outbox_of_call(call.tool_call_id)
    revisions = await world.revisions_of_call(call.tool_call_id)

    if different == "content":  # the case: a copy of a call file with new content
        reused = another_copy(call).model_copy(
            update={"arguments": {**arguments, "memory_content": "third"}}
        )
    elif different == "delete":
        reused = another_copy(call).model_copy(
            update={"arguments": {**arguments, "memory_content": ""}}
        )
    elif different == "memory_id":
        reused = another_copy(call).model_copy(
            update={"arguments": {**arguments, "memory_id": other_memory_id}}
        )
    elif different == "target_user":
        reused = another_copy(call).model_copy(
            update={
                "arguments": {
                    "memory_id": personal_id,
                    "memory_content": "x",
                    "target_user": "Trig",
                }
            }
        )
    elif different == "guild":
        reused = another_copy(call, guild_id=snowflake())
    elif different == "channel":
        reused = another_copy(call, channel_id=snowflake())
    elif different == "triggerer":
        reused = another_copy(call, triggerer_id=snowflake())
    else:
        persona = await world.persona(scene.server, lineage=scene.persona.lineage)
        reused = another_copy(call, persona_id=persona.persona_id)

    refused = await pipeline.run(reused)

    # Answered to the caller of the refused call, with the reason; nothing of it written.
    assert refused.reused_id and not refused.replayed
    assert refused.outbox == []
    result = assert_result(
        refused, reused, MemoryStatus.INVALID_ARGS, {"reason": "tool_call_id_reused"}
    )
    assert "already used for a different call" in result.message
    assert result.causation_id == reused.event_id
    after = [await pipeline.row(memory) for memory in (memory_id, other_memory_id, personal_id)]
    assert after == rows
    assert await world.outbox_of_call(call.tool_call_id) == outbox
    assert await world.revisions_of_call(call.tool_call_id) == revisions
    assert await world.inbox(call.tool_call_id) == inbox

    # The call the record is of is still answered from it.
    await assert_replayed(pipeline, first, call, another_copy(call))


async def test_a_stored_failure_does_not_let_another_call_run_under_its_id(
    pipeline: Pipeline,
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "kept")
    call = scene.call({"memory_id": str(memory_id), "memory_content": "new"})
    assert_result(await pipeline.run(call), call, MemoryStatus.INVALID_ARGS)
    inbox = await pipeline.world.inbox(call.tool_call_id)

    corrected = another_copy(call).model_copy(
        update={"arguments": {"memory_id": memory_id, "memory_content": "new"}}
    )
    refused = await pipeline.run(corrected)

    assert refused.reused_id
    assert refused.result.data.reason == "tool_call_id_reused"
    assert await pipeline.world.content(memory_id) == "kept"
    assert await pipeline.world.inbox(call.tool_call_id) == inbox


async def test_a_record_from_before_fingerprints_answers_any_call_with_its_id(
    pipeline: Pipeline,
) -> None:
    """Rows written before migration 0002 have no fingerprint: answered as they always were."""
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "first")
    call = scene.call({"memory_id": memory_id, "memory_content": "second"})
    first = await pipeline.run(call)
    await pipeline.sql(
        "UPDATE tool_call_inbox SET fingerprint = NULL WHERE tool_call_id = %s", call.tool_call_id
    )

    other = another_copy(call, channel_id=snowflake()).model_copy(
        update={"arguments": {"memory_id": memory_id, "memory_content": "third"}}
    )
    await assert_replayed(pipeline, first, call, other)

    assert await pipeline.world.content(memory_id) == "second"
