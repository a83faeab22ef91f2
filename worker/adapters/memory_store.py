"""The pipeline's database: one unit of work per batch of tool calls, on connections kept
between transactions, with BEGIN and COMMIT sent alongside the batch's statements.

`MemoryStore` implements `worker.ports.ToolCallStore`, `PostgresUnitOfWork`
`worker.ports.ToolCallTransaction`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from infra.storage.engine import named_cursor
from worker.adapters.inbox import PostgresInbox
from worker.adapters.members import PostgresMembers
from worker.adapters.memory_creations import PostgresScopeCreations
from worker.adapters.memory_writes import PostgresMemoryWrites
from worker.adapters.outbox import PostgresOutboxMarks
from worker.core.outgoing import UNTRACED, Traceparents
from worker.ports import Inbox, Members, MemoryWrites, OutboxMarks, ScopeCreations

__all__ = ["MemoryStore", "PostgresUnitOfWork", "pipelined_transaction"]

_BEGIN: Final = "BEGIN"
_COMMIT: Final = "COMMIT"
_ROLLBACK: Final = "ROLLBACK"

# A held connection goes back to the pool after this long, as the pool's own recycling would.
_HELD_FOR_S: Final = 1800.0


class PostgresUnitOfWork:
    """A batch's repositories on one connection in a transaction; all but the create tool's
    share one cursor (the create tool's reads each take one of their own, pipelined).

    `traceparents`: the trace context of each call (by tool_call_id), kept with its events.
    """

    __slots__ = ("inbox", "members", "memories", "outbox", "scopes")

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], traceparents: Traceparents | None = None
    ) -> None:
        cursor: psycopg.AsyncCursor[Any] = named_cursor(connection)
        self.inbox: Inbox = PostgresInbox(cursor, traceparents or UNTRACED)
        self.members: Members = PostgresMembers(cursor)
        self.memories: MemoryWrites = PostgresMemoryWrites(cursor)
        self.scopes: ScopeCreations = PostgresScopeCreations(connection)
        self.outbox: OutboxMarks = PostgresOutboxMarks(cursor)


@dataclass(slots=True)
class _HeldConnection:
    """A pooled connection kept between transactions, in autocommit (BEGIN is sent by hand)."""

    pooled: AsyncConnection
    driver: psycopg.AsyncConnection[Any]
    since: float


class MemoryStore:
    """The database of the pipeline: hands out one unit of work per batch of tool calls.

    Between transactions it keeps its connections out of the pool: a checkout and a return
    each, and the switch to autocommit and back, cost more than the rest of a one-call
    transaction's client side. At most as many are kept as transactions ran at once.
    """

    def __init__(self, engine: AsyncEngine, *, held_for_s: float = _HELD_FOR_S) -> None:
        self.engine = engine
        self._held_for_s = held_for_s
        self._idle: list[_HeldConnection] = []

    @asynccontextmanager
    async def transaction(
        self, traceparents: Traceparents | None = None
    ) -> AsyncIterator[PostgresUnitOfWork]:
        """Commits when the block ends normally, rolls back when it raises; `traceparents`:
        the calls' trace contexts, for their outbox rows."""
        async with self.driver_transaction() as connection:
            yield PostgresUnitOfWork(connection, traceparents)

    @asynccontextmanager
    async def driver_transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A psycopg connection in a transaction, committed when the block ends."""
        held = self._idle.pop() if self._idle else await self._hold()
        try:
            async with pipelined_transaction(held.driver):
                yield held.driver
        except BaseException:
            # Whatever failed, the connection goes back (or, lost, away) rather than being
            # trusted again: the retry takes a fresh one.
            await _let_go(held)
            raise
        if time.monotonic() - held.since > self._held_for_s:
            await _let_go(held)
        else:
            self._idle.append(held)

    async def _hold(self) -> _HeldConnection:
        pooled = await self.engine.connect()
        try:
            driver = (await pooled.get_raw_connection()).driver_connection
            assert isinstance(driver, psycopg.AsyncConnection)
            await driver.set_autocommit(True)
        except BaseException:
            await pooled.close()
            raise
        return _HeldConnection(pooled, driver, time.monotonic())

    async def release(self) -> None:
        """Gives the kept connections back to the pool."""
        while self._idle:
            await _let_go(self._idle.pop())

    async def close(self) -> None:
        """Gives the kept connections back, then closes the pool."""
        await self.release()
        await self.engine.dispose()


async def _let_go(held: _HeldConnection) -> None:
    """Back to the pool as the pool lent it; a lost connection is discarded instead."""
    driver = held.driver
    try:
        if not driver.closed:
            await driver.set_autocommit(False)
    except psycopg.Error:
        await driver.close()
    if driver.closed:
        await held.pooled.invalidate()
    await held.pooled.close()


@asynccontextmanager
async def pipelined_transaction(driver: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """A transaction whose BEGIN travels with the first statement and COMMIT with the last.

    In pipeline mode, statements whose rows are not read (BEGIN, the mark, FINISH, COMMIT) go
    with the next round trip. psycopg's `transaction()` would wait for BEGIN, and sync before
    COMMIT: three round trips of seven per batch. Hence BEGIN and COMMIT sent by hand, on a
    connection in autocommit, so that psycopg adds none of its own.
    """
    if not driver.autocommit:
        raise ValueError("a pipelined transaction needs a connection in autocommit")
    try:
        async with driver.pipeline():
            await driver.execute(_BEGIN)
            yield
            await driver.execute(_COMMIT)
            # Leaving the pipeline syncs: COMMIT's answer, or the first error of the batch.
    except BaseException:
        if not driver.closed and driver.info.transaction_status != TransactionStatus.IDLE:
            try:
                await driver.execute(_ROLLBACK)
            except psycopg.Error:
                await driver.close()  # the pool then discards it
        raise
