"""A second delivery of a tool_call_id changes nothing and answers the stored result again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import pytest

from contracts import MemoryStatus, ToolCallRequested
from tests.integration.worker.checks import Pipeline, Scene, assert_result
from tests.support.world import participant, snowflake
from worker.adapters.database import Answer, MemoryStore, ToolCallTransaction
from worker.adapters.outbox import OutboxRow, OutgoingEvent
from worker.service import Processed


class Crash(Exception):
    pass


class _CrashingTransaction(ToolCallTransaction):
    async def finish(
        self, answers: Sequence[Answer], events: Sequence[OutgoingEvent]
    ) -> list[OutboxRow]:
        await super().finish(answers, events)
        raise Crash("the worker died before the commit")


class CrashingStore(MemoryStore):
    """The real store, whose transactions fail after the last statement, before the commit."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ToolCallTransaction]:
        async with self.driver_transaction() as connection:
            yield _CrashingTransaction(connection)


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

    # Another copy, from another shard and channel, even with other arguments.
    again = another_copy(call, shard_id=7, channel_id=snowflake())
    again = again.model_copy(update={"arguments": {**arguments, "memory_content": "third"}})
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
