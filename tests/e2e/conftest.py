"""End-to-end fixtures: the real broker with the topology declared, and real `ltm` processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from contracts import Topology
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.world import World
from infra.messaging.topology import declare_topology
from infra.settings import Settings

__all__ = ["new_worker"]


@pytest.fixture(scope="session")
def topology(settings: Settings) -> Topology:
    return Topology(settings.amqp_prefix)


@pytest.fixture(scope="session")
async def amqp(settings: Settings, topology: Topology) -> AsyncIterator[AbstractRobustConnection]:
    connection = await aio_pika.connect_robust(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        # No shard queues: e2e tests read events through taps, and gateway tests own
        # the shard queues they consume.
        await declare_topology(channel, topology)
        yield connection


@pytest.fixture
async def channel(amqp: AbstractRobustConnection) -> AsyncIterator[AbstractChannel]:
    channel = await amqp.channel(publisher_confirms=True)
    yield channel
    await channel.close()


@pytest.fixture(scope="session")
def world(settings: Settings) -> World:
    return World(settings.database_url)


@pytest.fixture(scope="module")
def worker_process(
    services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LtmProcess]:
    """One `ltm worker` for a whole module of tests that do not crash it."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with LtmProcess(services, ("worker",), log, env={"LTM_DB_RETRY_SECONDS": "2"}) as process:
        process.wait_ready()
        yield process


def new_worker(services: TestServices, tmp: Path, name: str, **env: str) -> LtmProcess:
    return LtmProcess(services, ("worker",), tmp / f"{name}.log", env=env)
