"""A start that fails part way (here: a queue declared elsewhere with other arguments) leaves
nothing open or consuming, whether the gateway owns its connection or shares one."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
import pytest
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from contracts import Topology
from gateway import ConsoleSender, Gateway
from harness import services as support
from harness.waiting import eventually
from infra.settings import Settings
from tests.integration.gateway.conftest import SHARD_COUNT, fresh_shard


@pytest.fixture
async def named_connection(
    settings: Settings,
) -> AsyncIterator[tuple[str, AbstractRobustConnection]]:
    """A connection to share with a gateway, under a name the broker lists it by."""
    name = f"shared-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect_robust(
        settings.amqp_url, client_properties={"connection_name": name}
    )
    yield name, connection
    await connection.close()


async def _classic_queue(channel: AbstractChannel, name: str) -> None:
    """The queue as a classic one: the gateway's quorum declare of it then fails."""
    await channel.declare_queue(name, durable=True)


def _gateway(
    settings: Settings, shard: int, connection: AbstractRobustConnection | None = None
) -> Gateway:
    return Gateway(
        settings,
        sender=ConsoleSender(io.StringIO()),
        shards=(shard,),
        shard_count=SHARD_COUNT,
        connection=connection,
    )


async def test_a_failed_start_closes_its_own_connection(
    settings: Settings,
    services: support.TestServices,
    channel: AbstractChannel,
    amqp: AbstractRobustConnection,
    topology: Topology,
) -> None:
    shard = fresh_shard()
    await _classic_queue(channel, topology.shard_queue(shard))
    gateway = _gateway(settings, shard)
    try:
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await gateway.start()
        assert not gateway.is_running
        await eventually(
            lambda: _queue_gone(amqp, gateway.cache_queue), timeout=15, what="cache queue gone"
        )
        if services.vhost is not None:
            vhost = services.vhost
            await eventually(
                lambda: _no_connection(vhost, gateway.connection_name),
                timeout=15,
                what="the gateway's connection closed",
            )
    finally:
        await gateway.stop()
        await channel.queue_delete(topology.shard_queue(shard))


@pytest.mark.parametrize("failing", ["worker queue", "shard queue"])
async def test_a_failed_start_leaves_a_shared_connection_open_and_without_its_channels(
    settings: Settings,
    services: support.TestServices,
    named_connection: tuple[str, AbstractRobustConnection],
    amqp: AbstractRobustConnection,
    channel: AbstractChannel,
    failing: str,
) -> None:
    if services.vhost is None:
        pytest.skip("needs rabbitmqctl and a virtual host of our own")
    vhost = services.vhost
    name, connection = named_connection
    # A prefix of its own: the worker queue declared wrong must not trouble other tests.
    own = settings.model_copy(
        update={"amqp_prefix": f"{settings.amqp_prefix}f{uuid.uuid4().hex[:6]}"}
    )
    topology = Topology(own.amqp_prefix)
    shard = fresh_shard()
    wrong = topology.worker_queue if failing == "worker queue" else topology.shard_queue(shard)
    await _classic_queue(channel, wrong)

    gateway = _gateway(own, shard, connection=connection)
    try:
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await gateway.start()

        assert not gateway.is_running
        assert not connection.is_closed
        await eventually(
            lambda: asyncio.to_thread(_no_channels, vhost, name),
            timeout=15,
            what="the gateway's channels closed",
        )
        await eventually(
            lambda: _queue_gone(amqp, gateway.cache_queue), timeout=15, what="cache queue gone"
        )
    finally:
        await gateway.stop()
        await channel.queue_delete(wrong)


async def _queue_gone(connection: AbstractRobustConnection, name: str) -> bool:
    # A plain channel: the broker closes it when the queue is missing, and it stays closed.
    channel = await aio_pika.Channel(connection)
    try:
        await channel.declare_queue(name, passive=True)
        return False
    except aiormq.exceptions.ChannelLockedResource:
        return False  # exclusive to another connection: it exists
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return True
    finally:
        if not channel.is_closed:
            await channel.close()


async def _no_connection(vhost: str, name: str) -> bool:
    return not await asyncio.to_thread(support.connection_pids, vhost, name)


def _no_channels(vhost: str, name: str) -> bool:
    """True when the named connection is open and has no channel open on it."""
    (pid,) = support.connection_pids(vhost, name)
    listed = support.rabbitmqctl("list_channels", "-p", vhost, "connection").stdout
    return not any(line.strip() == pid for line in listed.splitlines())
