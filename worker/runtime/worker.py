"""The long-running worker: consume tool calls, run the pipeline, commit, publish, settle.

`Worker` supervises the connection's life, with the parts the composition root
(`ltm.composition`) built: `connection` reaches the broker and sets a connection up,
`delivery` handles each call, `batch_runner` runs a batch's unit of work within the `retry`
budget, `outbox_relay` sweeps what was left unpublished.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import aiormq
from aio_pika.abc import AbstractConnection

from infra.cancellation import being_cancelled
from infra.messaging import amqp
from infra.observability.logs import get_logger
from infra.settings import Settings
from worker.batching import CallBatcher
from worker.ports import ToolCallStore
from worker.runtime.batch_runner import Submitted
from worker.runtime.connection import Links, WorkQueueConsumer, connect, pause, start_consuming
from worker.runtime.delivery import DeliveryHandler
from worker.runtime.outbox_relay import OutboxRelay
from worker.service import Processed

__all__ = ["Worker"]

log = get_logger("ltm.worker")


@dataclass
class Worker:
    """`links`: what `start_consuming` opens on each connection, for `deliveries` and `relay`
    to publish on; `batcher` and `store` are closed when the worker stops."""

    settings: Settings
    store: ToolCallStore
    links: Links
    batcher: CallBatcher[Submitted, Processed]
    deliveries: DeliveryHandler
    relay: OutboxRelay
    _consuming: bool = field(default=False, init=False)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        # Which broker node next: a lost connection moves on to the node after it.
        self._broker_nodes = amqp.BrokerNodes.of(self.settings)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._consuming and not self.stopping

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Consumes until `stop()`, reconnecting whenever the broker goes away."""
        self._say_whom_it_trusts()
        sweeper = asyncio.create_task(self.relay.sweep_forever(), name="outbox-sweep")
        try:
            while (
                connection := await connect(self.settings, self._broker_nodes, self._stopping)
            ) is not None:
                await self._serve(connection)
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await self.store.close()
            log.info("worker.stopped")

    def _say_whom_it_trusts(self) -> None:
        trusted = self.settings.trusted_publishers
        if trusted is None:
            log.warning("worker.every_publisher_trusted", setting="LTM_TRUSTED_PUBLISHERS")
        else:
            log.info("worker.trusted_publishers", users=sorted(trusted))

    async def _serve(self, connection: AbstractConnection) -> None:
        """One connection's life: set up, consume until it closes or we stop, then drain."""
        try:
            async with connection:
                consumer = await start_consuming(
                    connection,
                    self.settings,
                    self.settings.topology,
                    self.links,
                    self.deliveries.on_delivery,
                )
                self._consuming = True
                if await self._lost_before_stop(consumer):
                    log.warning("worker.broker_connection_lost")
                    return
                await self._drain(consumer)
                await self.batcher.close()
                await self.relay.flush()
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            await self._connection_failed("the broker connection stalled")
        except (TimeoutError, OSError, RuntimeError, aiormq.exceptions.AMQPError) as error:
            # RuntimeError: how aio-pika and aiormq refuse work on a channel already closed.
            await self._connection_failed(repr(error))

    async def _lost_before_stop(self, consumer: WorkQueueConsumer) -> bool:
        """Waits for the stop or the connection's loss; True when the connection went first."""
        stopping = asyncio.create_task(self._stopping.wait())
        closed = asyncio.create_task(consumer.lost.wait())
        await asyncio.wait({stopping, closed}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        self._consuming = False
        if closed.done():
            return True
        closed.cancel()
        return False

    async def _connection_failed(self, error: str) -> None:
        self._consuming = False
        log.warning("worker.broker_connection_failed", error=error)
        await pause(self._stopping, 0.2)

    async def _drain(self, consumer: WorkQueueConsumer) -> None:
        """Stops taking new calls, then lets those in flight finish within the grace period."""
        with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, RuntimeError):
            await consumer.consuming.basic_cancel(consumer.tag)
        in_flight = self.deliveries.in_flight
        if in_flight:
            log.info("worker.draining", count=len(in_flight))
            _, pending = await asyncio.wait(set(in_flight), timeout=self.settings.shutdown_grace_s)
            if pending:
                log.warning("worker.left_for_redelivery", count=len(pending))
