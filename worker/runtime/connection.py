"""The worker's broker connection: reached with a backoff, set up the same way every time.

The connection is supervised here rather than by `connect_robust`, so that every reconnect
rebuilds the channels, the topology and the consumer the way the first start did.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

import aiormq
from aio_pika.abc import AbstractConnection
from aiormq.abc import DeliveredMessage

from contracts import Topology
from infra.messaging import amqp
from infra.messaging.topology import declare_topology
from infra.observability.logs import get_logger
from infra.redaction import mask_passwords
from infra.settings import Settings
from worker.adapters.broker import EventPublisher, ShardQueues
from worker.runtime.ports import Publisher, ReplyQueues

__all__ = ["Links", "WorkQueueConsumer", "connect", "pause", "start_consuming"]

log = get_logger("ltm.worker")

_FIRST_BACKOFF_S: Final = 0.2
_RECONNECT_MAX_S: Final = 5.0


@dataclass
class Links:
    """What publishes on the current connection; None between connections. `connection`
    itself: for an erasure's pass over the dead-letter queue, on a channel of its own."""

    publisher: Publisher | None = None
    shard_queues: ReplyQueues | None = None
    connection: AbstractConnection | None = None

    def both(self) -> tuple[Publisher, ReplyQueues]:
        assert self.publisher is not None and self.shard_queues is not None
        return self.publisher, self.shard_queues


@dataclass(frozen=True)
class WorkQueueConsumer:
    """One connection's consumer of the work queue: its raw channel, consumer tag, and an
    event set when the broker closes the connection or one of its channels."""

    consuming: aiormq.abc.AbstractChannel
    tag: str
    lost: asyncio.Event


async def pause(stopping: asyncio.Event, seconds: float) -> None:
    """Waits `seconds`, or less when the worker stops meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


async def connect(
    settings: Settings, nodes: amqp.BrokerNodes, stopping: asyncio.Event
) -> AbstractConnection | None:
    """A connection to one of the broker's `nodes`, retried with a backoff while none answers;
    None once stopping."""
    backoff = _FIRST_BACKOFF_S
    while not stopping.is_set():
        try:
            return await nodes.connect(client_properties={"connection_name": "ltm-worker"})
        except (OSError, aiormq.exceptions.AMQPError) as error:
            log.warning(
                "worker.broker_unreachable",
                url=mask_passwords(settings.amqp_url),
                error=str(error),
                retry_in_s=backoff,
            )
            await pause(stopping, backoff)
            backoff = min(backoff * 2, _RECONNECT_MAX_S)
    return None


async def start_consuming(
    connection: AbstractConnection,
    settings: Settings,
    topology: Topology,
    links: Links,
    on_delivery: Callable[[DeliveredMessage], Coroutine[Any, Any, None]],
) -> WorkQueueConsumer:
    """Declares the topology, opens the publisher (into `links`) and consumes the work queue."""
    setup = await connection.channel()
    await declare_topology(setup, topology)
    await setup.close()
    # `closed()` only resolves on our own close; a broker-side close runs callbacks. A channel
    # the broker closes alone (an exchange deleted, an ack refused) would leave the worker
    # publishing or consuming on nothing: all starts over.
    lost = asyncio.Event()
    links.publisher = await EventPublisher.open(connection, topology, on_lost=lost.set)
    links.shard_queues = ShardQueues(connection, topology, shard_count=settings.shard_count)
    links.connection = connection
    channel = await connection.channel()
    for closing in (connection, channel):
        closing.close_callbacks.add(lambda *_: lost.set())
    await channel.set_qos(prefetch_count=settings.prefetch)
    # Deliveries come straight from aiormq: aio-pika's IncomingMessage and its second task
    # per delivery are work the worker does not need.
    consuming = await channel.get_underlay_channel()
    tag = (await consuming.basic_consume(topology.worker_queue, on_delivery)).consumer_tag
    assert tag is not None
    log.info("worker.consuming", queue=topology.worker_queue, prefetch=settings.prefetch)
    return WorkQueueConsumer(consuming, tag, lost)
