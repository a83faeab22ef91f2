"""The pipeline on the real database: the real adapter, one transaction per call, no broker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from harness.world import World
from infra.settings import Settings
from infra.storage.engine import create_engine
from tests.integration.worker.checks import Pipeline
from worker.adapters.memory_store import MemoryStore

# Enough connections for the widest concurrency test to hold all its transactions at once.
POOL_SIZE = 8

# Per module, not per session: another module's test may take the run's database away for a
# moment (an outage of its own), which ends every open connection, a pool's included.


@pytest.fixture(scope="module")
async def store(settings: Settings) -> AsyncIterator[MemoryStore]:
    memory_store = MemoryStore(create_engine(settings.sqlalchemy_url, pool_size=POOL_SIZE))
    yield memory_store
    await memory_store.close()


@pytest.fixture(scope="module")
async def world(settings: Settings) -> AsyncIterator[World]:
    # One connection kept open: seeding a case takes a dozen statements, and a connection per
    # statement would cost more than the pipeline under test.
    shared = await World(settings.database_url).open()
    yield shared
    await shared.close()


@pytest.fixture(scope="module")
def pipeline(store: MemoryStore, world: World) -> Pipeline:
    return Pipeline(store, world)
