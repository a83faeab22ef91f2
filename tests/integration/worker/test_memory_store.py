"""The store keeps its connections between transactions, and lets go of one that failed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy.pool import QueuePool

from infra.settings import Settings
from infra.storage.engine import create_engine
from worker.adapters.memory_store import MemoryStore


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[MemoryStore]:
    own = MemoryStore(create_engine(settings.sqlalchemy_url, pool_size=2))
    yield own
    await own.close()


async def backend_pid(store: MemoryStore) -> int:
    async with store.driver_transaction() as connection:
        row = await (await connection.execute("SELECT pg_backend_pid()")).fetchone()
    assert row is not None
    return int(row[0])


def checked_out(store: MemoryStore) -> int:
    pool = store.engine.sync_engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


async def test_one_connection_serves_transaction_after_transaction(store: MemoryStore) -> None:
    first = await backend_pid(store)

    assert await backend_pid(store) == first
    assert checked_out(store) == 1
    await store.release()
    assert checked_out(store) == 0


async def test_a_connection_lost_between_transactions_is_replaced(
    store: MemoryStore, settings: Settings
) -> None:
    lost = await backend_pid(store)
    async with await psycopg.AsyncConnection.connect(settings.database_url) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (lost,))

    # The transaction that finds it gone fails (the worker retries it) ...
    with pytest.raises(psycopg.OperationalError):
        await backend_pid(store)
    # ... and the next one runs on a new connection; the lost one left the pool.
    assert await backend_pid(store) != lost
    assert checked_out(store) == 1


async def test_a_failed_transaction_commits_nothing_and_returns_its_connection(
    store: MemoryStore,
) -> None:
    with pytest.raises(LookupError):
        async with store.driver_transaction() as connection:
            await connection.execute("CREATE TABLE written_by_a_failed_transaction (id int)")
            raise LookupError("the pipeline failed")

    assert checked_out(store) == 0
    async with store.driver_transaction() as connection:
        row = await (
            await connection.execute("SELECT to_regclass('written_by_a_failed_transaction')")
        ).fetchone()
    assert row == (None,)
