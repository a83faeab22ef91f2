"""The long-running worker: consume tool calls, run the pipeline, commit, publish, settle.

`Worker` puts the parts together and supervises the connection's life: `connection` reaches
the broker and sets a connection up, `delivery` handles each call, `pipeline` runs a batch's
transaction within the `retry` budget, `outbox_relay` sweeps what was left unpublished.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Final

import aiormq
from aio_pika.abc import AbstractConnection

from infra.cancellation import being_cancelled
from infra.messaging import amqp
from infra.observability.logs import get_logger
from infra.settings import Settings
from worker.adapters.memory_store import MemoryStore
from worker.adapters.metrics import WorkerMetrics
from worker.adapters.outbox import OutboxStore
from worker.batching import CallBatcher, GroupCommit
from worker.runtime.connection import Links, Session, connect, open_session, pause
from worker.runtime.delivery import DeliveryHandler
from worker.runtime.outbox_relay import OutboxRelay
from worker.runtime.pipeline import BatchPipeline, Submitted
from worker.runtime.retry import shared_by_the_batch
from worker.service import Processed

__all__ = ["Worker"]

log = get_logger("ltm.worker")

# Marking rows published delays only the ack, not the result. Under load the next batch's
# transaction marks them before this runs out; when idle, one UPDATE marks all that came.
_MARK_LINGER_S: Final = 0.05


@dataclass
class Worker:
    settings: Settings
    store: MemoryStore
    outbox: OutboxStore
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)

    def __post_init__(self) -> None:
        self.topology = self.settings.topology
        # Which broker node next: a lost connection moves on to the node after it.
        self._broker_nodes = amqp.BrokerNodes.of(self.settings)
        self._links = Links()
        self._consuming = False
        self._stopping = asyncio.Event()
        published: GroupCommit[uuid.UUID] = GroupCommit(
            self.outbox.mark_published, linger_s=_MARK_LINGER_S
        )
        pipeline = BatchPipeline(self.settings, self.store, self.metrics, published)
        self._batcher: CallBatcher[Submitted, Processed] = CallBatcher(
            pipeline.run,
            max_batch=self.settings.max_batch,
            concurrency=min(self.settings.batch_concurrency, self.settings.db_pool_size),
            shared_fault=shared_by_the_batch,
        )
        self._deliveries = DeliveryHandler(
            self.settings,
            self.topology,
            self._links,
            metrics=self.metrics,
            batcher=self._batcher,
            published=published,
        )
        self.metrics.in_flight.set_function(lambda: len(self._deliveries.in_flight))
        self._relay = OutboxRelay(self.settings, self.outbox, self._links, self.metrics)

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
        sweeper = asyncio.create_task(self._relay.sweep_forever(), name="outbox-sweep")
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
                session = await open_session(
                    connection,
                    self.settings,
                    self.topology,
                    self._links,
                    self._deliveries.on_delivery,
                )
                self._consuming = True
                if await self._lost_before_stop(session):
                    log.warning("worker.broker_connection_lost")
                    return
                await self._drain(session)
                await self._batcher.close()
                await self._relay.flush()
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            await self._connection_failed("the broker connection stalled")
        except (TimeoutError, OSError, RuntimeError, aiormq.exceptions.AMQPError) as error:
            # RuntimeError: how aio-pika and aiormq refuse work on a channel already closed.
            await self._connection_failed(repr(error))

    async def _lost_before_stop(self, session: Session) -> bool:
        """Waits for the stop or the connection's loss; True when the connection went first."""
        stopping = asyncio.create_task(self._stopping.wait())
        closed = asyncio.create_task(session.lost.wait())
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

    async def _drain(self, session: Session) -> None:
        """Stops taking new calls, then lets those in flight finish within the grace period."""
        with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, RuntimeError):
            await session.consuming.basic_cancel(session.tag)
        in_flight = self._deliveries.in_flight
        if in_flight:
            log.info("worker.draining", count=len(in_flight))
            _, pending = await asyncio.wait(set(in_flight), timeout=self.settings.shutdown_grace_s)
            if pending:
                log.warning("worker.left_for_redelivery", count=len(pending))
