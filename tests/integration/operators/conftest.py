"""A topology of its own for each ops test, inside the test run's virtual host and prefix.

The dead-letter queue and the audit stream are shared by everything under one prefix; a
sub-prefix per test keeps other tests' workers and dead letters out of these counts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection

from contracts import Topology
from harness.broker import own_topology
from infra.settings import Settings


@pytest.fixture
async def ops_settings(settings: Settings) -> AsyncIterator[Settings]:
    async with own_topology(settings, "ops") as (own, _, _):
        yield own


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
