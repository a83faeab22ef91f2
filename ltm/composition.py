"""The composition root: builds the processes `ltm` runs from the settings, in one place (the
worker; the database's schema and the broker's topology they need). The gateway and the
console build their own (`gateway.process`, `console.app`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from typing import Final

from infra.messaging import amqp
from infra.messaging.topology import declare_topology as declare_broker_topology
from infra.observability.logs import get_logger
from infra.observability.metrics import serve_metrics
from infra.settings import Settings
from infra.storage.engine import create_engine
from worker.adapters.data_rights import DataRightsStore
from worker.adapters.memory_store import MemoryStore
from worker.adapters.metrics import WorkerMetrics
from worker.adapters.outbox import OutboxStore
from worker.batching import CallBatcher, GroupCommit
from worker.runtime import Worker
from worker.runtime.batch_runner import BatchRunner
from worker.runtime.connection import Links
from worker.runtime.data_requests import DataRequests
from worker.runtime.delivery import DeliveryHandler
from worker.runtime.hooks import FailpointHooks, Hooks, MetricsHooks, TracingHooks
from worker.runtime.outbox_relay import OutboxRelay
from worker.runtime.ports import Outbox
from worker.runtime.retry import shared_by_the_batch

__all__ = ["build_worker", "declare_topology", "migrate", "run_worker"]

log = get_logger("ltm")


def migrate(settings: Settings, *, roles: bool) -> int:
    from infra.storage.database import database_name
    from infra.storage.database import migrate as upgrade

    name = database_name(settings.database_url)
    created = upgrade(settings.database_url)
    found = f"created database {name}" if created else f"database {name} exists"
    print(f"{found}; its schema is up to date")
    if roles:
        from infra.storage.roles import ROLES, grant_roles

        grant_roles(settings.database_url)
        print(f"roles {', '.join(ROLES)} exist, granted what each uses in {name}")
    return 0


# Marking rows published delays only the ack, not the result. Under load the next batch's
# transaction marks them before this runs out; when idle, one UPDATE marks all that came.
_MARK_LINGER_S = 0.05


def build_worker(
    settings: Settings, metrics: WorkerMetrics, *, outbox: Outbox | None = None
) -> Worker:
    """The worker and every part of it, on one engine; `outbox`: another outbox than the
    worker's database's (a test's that holds the marks)."""
    engine = create_engine(
        settings.sqlalchemy_url,
        pool_size=settings.db_pool_size,
        lock_timeout_s=settings.db_lock_timeout_s,
    )
    store = MemoryStore(engine)
    outbox = outbox or OutboxStore(engine)
    links = Links()
    published = GroupCommit(outbox.mark_published, linger_s=_MARK_LINGER_S)
    batches = BatchRunner(settings, store, metrics, published)
    batcher = CallBatcher(
        batches.run,
        max_batch=settings.max_batch,
        concurrency=min(settings.batch_concurrency, settings.db_pool_size),
        shared_fault=shared_by_the_batch,
    )
    hooks = Hooks(TracingHooks(settings.topology), MetricsHooks(metrics), FailpointHooks())
    data_requests = DataRequests(settings, DataRightsStore(engine), links, published)
    deliveries = DeliveryHandler(
        settings,
        links,
        hooks=hooks,
        batcher=batcher,
        published=published,
        data_requests=data_requests,
    )
    metrics.in_flight.set_function(lambda: len(deliveries.in_flight))
    relay = OutboxRelay(settings, outbox, links, metrics)
    return Worker(
        settings=settings,
        store=store,
        links=links,
        batcher=batcher,
        deliveries=deliveries,
        relay=relay,
    )


def _stop_on_signals(worker: Worker) -> None:
    """SIGTERM and SIGINT stop the worker: it drains what is in flight, then `run` returns."""

    def stop() -> None:
        if worker.stopping:  # Ctrl-C reaches every process of the group, then a SIGTERM
            return
        worker.stop()  # before the log line: a stop must not depend on the output
        log.info("worker.stopping")

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # pragma: no cover - not on Windows
            loop.add_signal_handler(signum, stop)


async def declare_topology(settings: Settings, *, recreate_audit_stream: bool = False) -> int:
    """`ltm topology`; with `recreate_audit_stream`, the audit stream is deleted first (every
    event it holds with it), then declared again with the rest."""
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel()
        if recreate_audit_stream:
            stream = settings.topology.audit_stream
            await channel.queue_delete(stream)
            log.warning("topology.audit_stream_deleted", queue=stream)
        await declare_broker_topology(
            channel, settings.topology, shards=range(settings.shard_count)
        )
    print(
        f"topology declared under prefix {settings.amqp_prefix!r} "
        f"with {settings.shard_count} shard queue(s)"
    )
    return 0


# The cycle collector's generation thresholds in the worker (Python's default: 700, 10, 10).
# Calls in flight hold tens of thousands of container objects, freed by reference counting
# once answered; at 700 a collection came every few calls and moved them to the older
# generations, whose collections took 12 to 17 % of the worker's CPU under load. At 50,000 only
# garbage that accumulates starts one (bench/RESULTS.md, "The cycle collector").
_GC_THRESHOLDS: Final = (50_000, 20, 100)


async def run_worker(settings: Settings) -> int:
    metrics = WorkerMetrics()
    worker = build_worker(settings, metrics)
    metrics_runner = None
    if settings.metrics_port:
        metrics_runner = await serve_metrics(
            metrics.registry,
            host=settings.metrics_host,
            port=settings.metrics_port,
            ready=lambda: worker.ready,
            port_setting="LTM_METRICS_PORT",
        )
    _stop_on_signals(worker)
    # What is alive now lives as long as the process: the collector need not walk it again.
    # Full collections of it were the worker's longest pauses (tens of ms) under load.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        await worker.run()
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
    return 0
