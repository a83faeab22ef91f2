"""Calls in flight at the same time, each in its own transaction on its own connection.

A rendezvous (an asyncio barrier inside the real adapter) holds every transaction at the same
step until all have reached it, so that they really overlap in the database.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import psycopg
import pytest

from contracts import MemoryStatus, ToolCallRequested
from infra.storage.engine import named_cursor
from tests.integration.worker.checks import (
    Pipeline,
    assert_result,
    assert_success_events,
)
from worker.adapters.inbox import PostgresInbox
from worker.adapters.memory_store import MemoryStore, PostgresUnitOfWork
from worker.adapters.memory_writes import PostgresMemoryWrites
from worker.core.model import ForbiddenWrite, StaleWrite, WrittenMemory
from worker.core.outgoing import UNTRACED, Traceparents
from worker.core.records import Claim, PlannedWrite
from worker.service import Processed

Step = Literal["claim", "apply"]


class _RendezvousInbox(PostgresInbox):
    def __init__(self, cursor: psycopg.AsyncCursor[Any], barrier: asyncio.Barrier) -> None:
        super().__init__(cursor, UNTRACED)
        self._barrier = barrier

    async def claim(self, calls: Sequence[ToolCallRequested]) -> list[Claim]:
        await self._barrier.wait()
        return await super().claim(calls)


class _RendezvousWrites(PostgresMemoryWrites):
    def __init__(self, cursor: psycopg.AsyncCursor[Any], barrier: asyncio.Barrier) -> None:
        super().__init__(cursor)
        self._barrier = barrier

    async def apply(
        self, writes: Sequence[PlannedWrite]
    ) -> list[WrittenMemory | ForbiddenWrite | StaleWrite | None]:
        await self._barrier.wait()
        return await super().apply(writes)


class RendezvousStore(MemoryStore):
    """The real store, whose transactions wait for each other before `step`."""

    def __init__(self, store: MemoryStore, parties: int, step: Step) -> None:
        super().__init__(store.engine)
        self._barrier = asyncio.Barrier(parties)
        self._step = step

    @asynccontextmanager
    async def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AsyncIterator[PostgresUnitOfWork]:
        async with self.driver_transaction() as connection:
            tx = PostgresUnitOfWork(connection)
            if self._step == "claim":
                tx.inbox = _RendezvousInbox(named_cursor(connection), self._barrier)
            else:
                tx.memories = _RendezvousWrites(named_cursor(connection), self._barrier)
            yield tx


@asynccontextmanager
async def rendezvous(pipeline: Pipeline, parties: int, step: Step) -> AsyncIterator[MemoryStore]:
    """A `RendezvousStore` whose kept connections go back to the pool afterwards."""
    store = RendezvousStore(pipeline.store, parties, step)
    try:
        yield store
    finally:
        await store.release()


async def all_at_once(
    pipeline: Pipeline, calls: list[ToolCallRequested], step: Step
) -> list[Processed]:
    async with rendezvous(pipeline, len(calls), step) as store, asyncio.timeout(20):
        runs: list[Awaitable[Processed]] = [pipeline.run(call, store=store) for call in calls]
        return list(await asyncio.gather(*runs))


def assert_chain(revisions: list[dict[str, Any]], original: str) -> None:
    """Each revision starts from what the one before it left."""
    assert revisions[0]["content_before"] == original
    for earlier, later in itertools.pairwise(revisions):
        assert later["content_before"] == earlier["content_after"]


@pytest.mark.parametrize("writers", [2, 5])
@pytest.mark.parametrize("scope", ["server_wide", "target_user"])
async def test_concurrent_updates_of_one_memory_all_commit_in_a_chain(
    pipeline: Pipeline, writers: int, scope: str
) -> None:
    scene = await pipeline.guild()
    arguments: dict[str, Any]
    if scope == "server_wide":
        memory_id = await pipeline.server_memory(scene.persona, "original")
        arguments = {"memory_id": memory_id}
        cache, cache_key, owner_id = "persona_state", scene.server.disc_id, None
    else:
        memory_id = await pipeline.personal_memory(scene.triggerer_user_id, 0, "original")
        arguments = {"memory_id": memory_id, "target_user": "Trig"}
        cache, cache_key, owner_id = "user", scene.triggerer, scene.triggerer
    contents = [f"version {n}" for n in range(writers)]
    calls = [scene.call({**arguments, "memory_content": content}) for content in contents]

    results = await all_at_once(pipeline, calls, "apply")

    for call, processed in zip(calls, results, strict=True):
        assert_result(processed, call, MemoryStatus.UPDATED)
    revisions = await pipeline.world.revisions(memory_id)
    assert len(revisions) == writers
    assert sorted(r["tool_call_id"] for r in revisions) == sorted(c.tool_call_id for c in calls)
    assert_chain(revisions, "original")
    assert await pipeline.world.content(memory_id) == revisions[-1]["content_after"]
    by_call = {revision["tool_call_id"]: revision for revision in revisions}
    for call, processed, content in zip(calls, results, contents, strict=True):
        revision = by_call[call.tool_call_id]
        assert revision["content_after"] == content
        assert processed.result.data.content_saved == content
        await assert_success_events(
            pipeline.world,
            processed,
            call,
            revision=revision,
            cache=cache,  # type: ignore[arg-type]
            cache_key=cache_key,
            owner_id=owner_id,
        )


async def test_concurrent_update_and_delete_agree(pipeline: Pipeline) -> None:
    """Whichever goes first, the delete wins in the end and the history holds."""
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "original")
    update = scene.call({"memory_id": memory_id, "memory_content": "updated"})
    delete = scene.call({"memory_id": memory_id, "memory_content": ""})

    updated, deleted = await all_at_once(pipeline, [update, delete], "apply")

    assert_result(deleted, delete, MemoryStatus.DELETED)
    assert await pipeline.world.content(memory_id) is None
    revisions = await pipeline.world.revisions(memory_id)
    assert_chain(revisions, "original")
    assert revisions[-1]["action"] == "deleted"
    assert revisions[-1]["tool_call_id"] == delete.tool_call_id
    if updated.result.status is MemoryStatus.UPDATED:
        # The update went first; the delete removed what it wrote.
        assert [r["tool_call_id"] for r in revisions] == [update.tool_call_id, delete.tool_call_id]
        assert deleted.result.data.content_deleted == "updated"
    else:
        # The delete went first; the update found nothing, and says so.
        assert_result(updated, update, MemoryStatus.NOT_FOUND)
        assert len(revisions) == 1
        assert deleted.result.data.content_deleted == "original"
        assert [r.routing_key for r in updated.outbox] == ["result.shard.2"]


@pytest.mark.parametrize("outcome", ["success", "failure"])
async def test_two_copies_of_one_tool_call_at_once_apply_once(
    pipeline: Pipeline, outcome: str
) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "original")
    content = "changed" if outcome == "success" else "far too long for the limit"
    call = scene.call({"memory_id": memory_id, "memory_content": content})
    copy = call.model_copy(update={"event_id": uuid.uuid4()})
    async with rendezvous(pipeline, 2, "claim") as store, asyncio.timeout(20):
        first, second = await asyncio.gather(
            pipeline.run(call, max_memory_length=10, store=store),
            pipeline.run(copy, max_memory_length=10, store=store),
        )

    applied = [p for p in (first, second) if not p.replayed]
    answered = [p for p in (first, second) if p.replayed]
    assert len(applied) == 1
    assert len(answered) == 1
    status = MemoryStatus.UPDATED if outcome == "success" else MemoryStatus.INVALID_CONTENT
    (done,), (again,) = applied, answered
    assert_result(done, call, status)
    assert_result(again, call, status)
    assert (again.result.message, again.result.data) == (done.result.message, done.result.data)
    assert again.outbox == []
    outbox = await pipeline.world.outbox_of_call(call.tool_call_id)
    assert [row["event_id"] for row in outbox] == [row.event_id for row in done.outbox]
    revisions = await pipeline.world.revisions_of_call(call.tool_call_id)
    if outcome == "success":
        assert len(outbox) == 4
        assert len(revisions) == 1
        assert await pipeline.world.content(memory_id) == "changed"
    else:
        assert len(outbox) == 1
        assert revisions == []
        assert await pipeline.world.content(memory_id) == "original"


async def test_two_different_calls_under_one_id_at_once_apply_one_and_refuse_the_other(
    pipeline: Pipeline,
) -> None:
    """Two workers: both claim at once; the second waits on the first's inbox row, then reads
    its fingerprint."""
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "original")
    call = scene.call({"memory_id": memory_id, "memory_content": "one"})
    other = call.model_copy(
        update={
            "event_id": uuid.uuid4(),
            "arguments": {"memory_id": memory_id, "memory_content": "other"},
        }
    )

    results = await all_at_once(pipeline, [call, other], "claim")

    applied = [p for p in results if p.result.status is MemoryStatus.UPDATED]
    refused = [p for p in results if p.reused_id]
    assert len(applied) == 1 and len(refused) == 1, [p.result for p in results]
    (done,), (turned_down,) = applied, refused
    assert turned_down.result.status is MemoryStatus.INVALID_ARGS
    assert turned_down.result.data.reason == "tool_call_id_reused"
    assert turned_down.outbox == []
    assert await pipeline.world.content(memory_id) == done.result.data.content_saved
    revisions = await pipeline.world.revisions_of_call(call.tool_call_id)
    assert len(revisions) == 1
    outbox = await pipeline.world.outbox_of_call(call.tool_call_id)
    assert [row["event_id"] for row in outbox] == [row.event_id for row in done.outbox]
