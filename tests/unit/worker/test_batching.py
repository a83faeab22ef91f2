"""Batching calls that arrive together, and group commits: the asyncio logic alone."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from harness.waiting import eventually
from worker.batching import CallBatcher, GroupCommit


class Transient(Exception):
    pass


class Broken(Exception):
    pass


class Flushes:
    """A group commit's flush that records the ids of each call, held at `gate` if given."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.calls: list[list[int]] = []
        self._gate = gate

    async def __call__(self, ids: list[int]) -> None:
        self.calls.append(ids)
        if self._gate is not None:
            await self._gate.wait()


async def test_calls_that_arrive_together_share_a_batch_and_get_their_own_results() -> None:
    batches: list[list[int]] = []
    release = asyncio.Event()

    async def run(calls: list[int]) -> list[int]:
        batches.append(calls)
        await release.wait()
        return [call * 10 for call in calls]

    batcher: CallBatcher[int, int] = CallBatcher(
        run, max_batch=10, concurrency=1, shared_fault=lambda e: isinstance(e, Transient)
    )
    first = asyncio.create_task(batcher.submit("a", 1))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(batcher.submit(f"k{n}", n)) for n in range(2, 6)]

    async def first_batch_running() -> bool:
        return batches == [[1]]

    await eventually(first_batch_running, timeout=5, interval=0, what="the first batch running")
    release.set()
    assert await first == 10
    assert [await task for task in rest] == [20, 30, 40, 50]
    # The first ran alone; the others queued behind it and went together.
    assert batches == [[1], [2, 3, 4, 5]]
    await batcher.close()


async def test_two_copies_of_one_call_never_share_a_batch() -> None:
    batches: list[list[str]] = []

    async def run(calls: list[str]) -> list[str]:
        batches.append(calls)
        await asyncio.sleep(0)
        return calls

    batcher: CallBatcher[str, str] = CallBatcher(
        run, max_batch=10, concurrency=1, shared_fault=lambda e: False
    )
    results = await asyncio.gather(*(batcher.submit(key, key) for key in ["x", "y", "x", "z"]))
    assert results == ["x", "y", "x", "z"]
    assert all(len(batch) == len(set(batch)) for batch in batches)
    assert sum(len(batch) for batch in batches) == 4
    await batcher.close()


async def test_a_call_that_fails_alone_fails_only_itself() -> None:
    runs: list[list[int]] = []

    async def run(calls: list[int]) -> list[int]:
        runs.append(calls)
        if 3 in calls:
            raise Broken("call 3 breaks its transaction")
        return calls

    batcher: CallBatcher[int, int] = CallBatcher(
        run, max_batch=10, concurrency=1, shared_fault=lambda e: isinstance(e, Transient)
    )
    outcomes = await asyncio.gather(
        *(batcher.submit(str(n), n) for n in range(1, 6)), return_exceptions=True
    )
    assert outcomes[:2] == [1, 2] and outcomes[3:] == [4, 5]
    assert isinstance(outcomes[2], Broken)
    assert [3] in runs  # retried alone before being declared failed
    await batcher.close()


async def test_a_shared_fault_fails_the_whole_batch_without_retrying_alone() -> None:
    runs: list[list[int]] = []

    async def run(calls: list[int]) -> list[int]:
        runs.append(calls)
        raise Transient("the database went away")

    batcher: CallBatcher[int, int] = CallBatcher(
        run, max_batch=10, concurrency=1, shared_fault=lambda e: isinstance(e, Transient)
    )
    outcomes = await asyncio.gather(
        *(batcher.submit(str(n), n) for n in range(3)), return_exceptions=True
    )
    assert all(isinstance(outcome, Transient) for outcome in outcomes)
    assert all(len(batch) > 0 for batch in runs)
    assert sum(len(batch) for batch in runs) == 3  # each call tried once, none alone again
    await batcher.close()


async def test_no_more_than_the_allowed_batches_run_at_once() -> None:
    running = 0
    most = 0

    async def run(calls: list[int]) -> list[int]:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.005)
        running -= 1
        return calls

    batcher: CallBatcher[int, int] = CallBatcher(
        run, max_batch=2, concurrency=2, shared_fault=lambda e: False
    )
    await asyncio.gather(*(batcher.submit(str(n), n) for n in range(20)))
    assert most == 2
    await batcher.close()


async def test_group_commit_flushes_what_arrived_meanwhile_in_one_call() -> None:
    gate = asyncio.Event()
    flushed = Flushes(gate)
    group = GroupCommit(flushed)
    first = asyncio.create_task(group.submit([1]))
    await asyncio.sleep(0)
    later = [asyncio.create_task(group.submit([n])) for n in (2, 3, 4)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *later)
    assert flushed.calls == [[1], [2, 3, 4]]


async def test_group_commit_reports_a_failed_flush_to_its_callers() -> None:
    async def flush(ids: list[int]) -> None:
        raise Broken("no database")

    group = GroupCommit(flush)
    with pytest.raises(Broken):
        await group.submit([1, 2])


async def test_group_commit_lingers_so_that_callers_just_after_share_the_flush() -> None:
    flushed = Flushes()
    group = GroupCommit(flushed, linger_s=0.2)
    first = asyncio.create_task(group.submit([1]))
    await asyncio.sleep(0.05)  # well inside the linger: nothing may be flushed yet
    assert flushed.calls == []
    await asyncio.gather(first, group.submit([2]))
    assert flushed.calls == [[1, 2]]


async def test_group_commit_hands_waiting_ids_to_a_transaction_that_takes_them() -> None:
    flushed = Flushes()
    group = GroupCommit(flushed, linger_s=0.05)
    waiting = asyncio.create_task(group.submit([1, 2]))
    await asyncio.sleep(0)
    taken = group.take()
    assert taken is not None and taken.ids == [1, 2]
    assert group.take() is None
    assert not waiting.done()
    taken.flushed()
    await asyncio.wait_for(waiting, 1)
    await asyncio.sleep(0.1)  # past the linger: nothing is left for a flush of its own
    assert flushed.calls == []


async def test_group_commit_flushes_what_a_failed_taker_gives_back() -> None:
    flushed = Flushes()
    group = GroupCommit(flushed, linger_s=0.01)
    waiting = asyncio.create_task(group.submit([1]))
    await asyncio.sleep(0)
    taken = group.take()
    assert taken is not None
    later = asyncio.create_task(group.submit([2]))
    await asyncio.sleep(0)
    group.give_back(taken)
    await asyncio.wait_for(asyncio.gather(waiting, later), 1)
    assert sorted(id_ for ids in flushed.calls for id_ in ids) == [1, 2]


async def test_a_cancelled_caller_leaves_the_others_waiting_on_the_same_flush() -> None:
    # aiormq cancels a lost connection's handlers, some of them waiting here.
    gate = asyncio.Event()
    flushed = Flushes(gate)
    group = GroupCommit(flushed)
    busy = asyncio.create_task(group.submit([1]))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(group.submit([2]))
    sharing = asyncio.create_task(group.submit([3]))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(asyncio.gather(busy, sharing), 1)
    assert cancelled.cancelled()
    assert flushed.calls == [[1], [2, 3]]


async def test_the_flushes_go_on_after_a_caller_was_cancelled() -> None:
    gate = asyncio.Event()
    flushed = Flushes(gate)
    group = GroupCommit(flushed)
    only = asyncio.create_task(group.submit([1]))
    await asyncio.sleep(0)
    only.cancel()
    later = asyncio.create_task(group.submit([2]))
    await asyncio.sleep(0)
    gate.set()
    # No later submit comes along to start another flush: the one running must see to it.
    await asyncio.wait_for(later, 1)
    assert flushed.calls == [[1], [2]]


_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


async def test_batches_run_outside_the_context_of_the_call_that_started_them() -> None:
    # The context carries a call's log bindings (its tool_call_id); a batch serves many calls.
    seen: list[str] = []

    async def run(calls: list[int]) -> list[int]:
        seen.append(_CALLER.get())
        return calls

    batcher: CallBatcher[int, int] = CallBatcher(
        run, max_batch=10, concurrency=1, shared_fault=lambda e: False
    )

    async def call_as(name: str, n: int) -> int:
        _CALLER.set(name)
        return await batcher.submit(name, n)

    assert await asyncio.create_task(call_as("first", 1)) == 1
    assert await asyncio.create_task(call_as("second", 2)) == 2
    assert seen == ["none", "none"]
    await batcher.close()
