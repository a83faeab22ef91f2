"""A topology of its own for each ops test, inside the test run's virtual host and prefix.

The dead-letter queue and the audit stream are shared by everything under one prefix; a
sub-prefix per test keeps other tests' workers and dead letters out of these counts.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection

from contracts import Topology
from infra.settings import Settings
from infra.topology import declare_topology


@pytest.fixture
async def ops_settings(settings: Settings) -> AsyncIterator[Settings]:
    own = settings.model_copy(
        update={"amqp_prefix": f"{settings.amqp_prefix}-ops{uuid.uuid4().hex[:8]}"}
    )
    topology = Topology(own.amqp_prefix)
    connection = await aio_pika.connect(own.amqp_url)
    async with connection:
        channel = await connection.channel()
        await declare_topology(channel, topology)
        yield own
        await _delete_topology(channel, topology)


@pytest.fixture
async def connection(ops_settings: Settings) -> AsyncIterator[AbstractConnection]:
    async with await aio_pika.connect(ops_settings.amqp_url) as opened:
        yield opened


@pytest.fixture
async def channel(connection: AbstractConnection) -> AbstractChannel:
    return await connection.channel(publisher_confirms=True)


@pytest.fixture
def topology(ops_settings: Settings) -> Topology:
    return Topology(ops_settings.amqp_prefix)


async def _delete_topology(channel: AbstractChannel, topology: Topology) -> None:
    for queue in (topology.worker_queue, topology.dead_letter_queue, topology.audit_stream):
        await channel.queue_delete(queue)
    for exchange in (
        topology.tool_calls_exchange,
        topology.dead_letter_exchange,
        topology.events_exchange,
    ):
        await channel.exchange_delete(exchange)
