"""Grouping work that arrives together: several tool calls per transaction, and one UPDATE
marking many outbox rows published.

Under load, deliveries queue up while the database is busy with the previous transactions,
so the next transaction takes all of them: round trips are paid per batch, not per call.
At low load a batch is a single call, and nothing waits for company.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["CallBatcher", "GroupCommit", "TakenFlush"]

Call = TypeVar("Call")
Result = TypeVar("Result")
Id = TypeVar("Id")


@dataclass
class _Waiting(Generic[Call, Result]):
    key: str
    call: Call
    done: asyncio.Future[Result] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class CallBatcher(Generic[Call, Result]):
    """Runs submitted calls in batches of distinct keys, at most `concurrency` at a time.

    `run` takes a batch and returns one result per call, in order, or raises for the whole
    batch. A batch that fails for a reason other than `shared_fault` is run again one call
    at a time, so that a call that fails alone fails only itself.
    """

    def __init__(
        self,
        run: Callable[[list[Call]], Awaitable[list[Result]]],
        *,
        max_batch: int,
        concurrency: int,
        shared_fault: Callable[[BaseException], bool],
    ) -> None:
        self._run = run
        self._max_batch = max_batch
        self._slots = asyncio.Semaphore(concurrency)
        self._shared_fault = shared_fault
        self._queue: asyncio.Queue[_Waiting[Call, Result]] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._dispatcher: asyncio.Task[None] | None = None

    async def submit(self, key: str, call: Call) -> Result:
        if self._dispatcher is None or self._dispatcher.done():
            # A context of its own: the batches it starts serve many calls, not this caller's.
            self._dispatcher = asyncio.create_task(
                self._dispatch(), name="call-batcher", context=contextvars.Context()
            )
        waiting: _Waiting[Call, Result] = _Waiting(key, call)
        self._queue.put_nowait(waiting)
        return await waiting.done

    async def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _dispatch(self) -> None:
        while True:
            first = await self._queue.get()
            await self._slots.acquire()
            batch: list[_Waiting[Call, Result]] = [first]
            later: list[_Waiting[Call, Result]] = []
            keys = {first.key}
            while len(batch) < self._max_batch and not self._queue.empty():
                waiting = self._queue.get_nowait()
                # Two copies of one call never share a batch: the second must see the first.
                (later if waiting.key in keys else batch).append(waiting)
                keys.add(waiting.key)
            for waiting in later:
                self._queue.put_nowait(waiting)
            task = asyncio.create_task(self._run_batch(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run_batch(self, batch: Sequence[_Waiting[Call, Result]]) -> None:
        try:
            try:
                results = await self._run([waiting.call for waiting in batch])
            except Exception as error:
                if len(batch) == 1 or self._shared_fault(error):
                    for waiting in batch:
                        _fail(waiting, error)
                    return
                for waiting in batch:
                    await self._run_alone(waiting)
                return
            for waiting, result in zip(batch, results, strict=True):
                if not waiting.done.done():
                    waiting.done.set_result(result)
        finally:
            self._slots.release()

    async def _run_alone(self, waiting: _Waiting[Call, Result]) -> None:
        try:
            [result] = await self._run([waiting.call])
        except Exception as error:
            _fail(waiting, error)
        else:
            if not waiting.done.done():
                waiting.done.set_result(result)


def _fail(waiting: _Waiting[Call, Result], error: BaseException) -> None:
    if not waiting.done.done():
        waiting.done.set_exception(error)


@dataclass
class TakenFlush(Generic[Id]):
    """Ids handed to a transaction that was going to commit anyway; it reports back."""

    ids: list[Id]
    done: asyncio.Future[None]

    def flushed(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class GroupCommit(Generic[Id]):
    """Many callers' ids, one `flush` call for all that arrived while the last one ran.

    A transaction that is about to commit anyway may `take` what waits and write it itself,
    saving a transaction of its own; what it cannot commit it gives back.
    """

    def __init__(
        self, flush: Callable[[list[Id]], Awaitable[None]], *, linger_s: float = 0.0
    ) -> None:
        self._flush = flush
        self._linger_s = linger_s
        self._pending: list[Id] = []
        self._next: asyncio.Future[None] | None = None
        self._running = False
        self._task: asyncio.Task[None] | None = None

    async def submit(self, ids: Sequence[Id]) -> None:
        """Returns once a flush that included `ids` has completed (or raises its error)."""
        # Shielded: every caller of one flush awaits the same future, and a cancelled caller
        # (aiormq cancels a lost connection's handlers) must not cancel it for the others.
        await asyncio.shield(self._waiter_for(ids))

    def take(self) -> TakenFlush[Id] | None:
        if not self._pending:
            return None
        ids, self._pending = self._pending, []
        done, self._next = self._next, None
        assert done is not None
        return TakenFlush(ids, done)

    def give_back(self, taken: TakenFlush[Id]) -> None:
        """For a taker whose transaction failed: the ids wait for the next flush again."""
        _settle_with(self._waiter_for(taken.ids), taken.done)

    def _waiter_for(self, ids: Sequence[Id]) -> asyncio.Future[None]:
        self._pending.extend(ids)
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            # Its callers may all have been cancelled: then a failed flush is read by no one.
            self._next.add_done_callback(_retrieved)
        if not self._running:
            self._running = True
            self._task = asyncio.create_task(self._drain(), context=contextvars.Context())
        return self._next

    async def _drain(self) -> None:
        try:
            while self._pending:
                if self._linger_s:
                    # Callers finishing just after this one share its flush.
                    await asyncio.sleep(self._linger_s)
                ids, self._pending = self._pending, []
                done, self._next = self._next, None
                if done is None:  # a transaction took them while this lingered
                    continue
                try:
                    await self._flush(ids)
                except Exception as error:
                    if not done.done():
                        done.set_exception(error)
                else:
                    if not done.done():
                        done.set_result(None)
        finally:
            self._running = False


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _settle_with(source: asyncio.Future[None], target: asyncio.Future[None]) -> None:
    def copy(_: asyncio.Future[None]) -> None:
        if target.done():
            return
        if source.cancelled():
            target.cancel()
        elif (error := source.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(None)

    source.add_done_callback(copy)
