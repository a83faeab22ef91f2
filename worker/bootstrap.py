"""The composition root: builds every process of `ltm` from the settings, in one place."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal

from infra import amqp
from infra.logs import get_logger
from infra.metrics import serve_metrics
from infra.settings import Settings
from infra.topology import declare_topology as declare_broker_topology
from worker.adapters.database import MemoryStore, create_engine
from worker.adapters.outbox import OutboxStore
from worker.runtime import Worker

__all__ = [
    "audit",
    "build_worker",
    "call",
    "console",
    "declare_topology",
    "dlq",
    "memory",
    "run_gateway",
    "run_worker",
]

log = get_logger("ltm")


def build_worker(settings: Settings) -> Worker:
    engine = create_engine(
        settings.sqlalchemy_url,
        pool_size=settings.db_pool_size,
        lock_timeout_s=settings.db_lock_timeout_s,
    )
    return Worker(settings=settings, store=MemoryStore(engine), outbox=OutboxStore(engine))


def _stop_on_signals(worker: Worker) -> None:
    """SIGTERM and SIGINT stop the worker: it drains what is in flight, then `run` returns."""

    def stop() -> None:
        if worker.stopping:  # Ctrl-C reaches every process of the group, then a SIGTERM
            return
        worker.stop()  # before the log line: a stop must not depend on the output
        log.info("stopping: draining in-flight calls")

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # pragma: no cover - not on Windows
            loop.add_signal_handler(signum, stop)


async def declare_topology(settings: Settings) -> int:
    connection = await amqp.connect(settings)
    async with connection:
        channel = await connection.channel()
        await declare_broker_topology(
            channel, settings.topology, shards=range(settings.shard_count)
        )
    print(
        f"topology declared under prefix {settings.amqp_prefix!r} "
        f"with {settings.shard_count} shard queue(s)"
    )
    return 0


async def run_worker(settings: Settings) -> int:
    worker = build_worker(settings)
    metrics_runner = None
    if settings.metrics_port:
        metrics_runner = await serve_metrics(
            worker.metrics.registry,
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
    try:
        await worker.run()
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
    return 0


async def run_gateway(settings: Settings, shards: tuple[int, ...], shard_count: int) -> int:
    from gateway.app import run_gateway as run

    return await run(settings, shards, shard_count)


async def call(settings: Settings, body: bytes, timeout: float, *, as_json: bool) -> int:
    from worker.ops.call import call_and_print

    return await call_and_print(settings, body, timeout=timeout, as_json=as_json)


async def dlq(settings: Settings, args: argparse.Namespace) -> int:
    from worker.ops import dead_letters

    return await dead_letters.run_command(settings, args)


async def audit(settings: Settings, args: argparse.Namespace) -> int:
    if args.audit_command == "history":
        from worker.ops.revisions import print_history

        return await print_history(settings, args.memory_id, as_json=args.as_json)
    from worker.ops import audit_stream

    return await audit_stream.run_command(settings, args)


async def memory(settings: Settings, args: argparse.Namespace) -> int:
    if args.memory_command == "list":
        from worker.ops import memory_list

        return await memory_list.run_command(settings, args)
    from worker.ops.revisions import restore

    return await restore(settings, args.revision_id, actor=args.actor, as_json=args.as_json)


async def console(settings: Settings, host: str, port: int) -> int:
    from console.app import run_console

    return await run_console(settings, host, port)
