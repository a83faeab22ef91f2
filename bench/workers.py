"""Worker processes of the bench: `python -m ltm worker`, each with a metrics port of
its own, started on the services of a `Bench` (the machine's broker, or a cluster's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bench.cpu import CpuMeter
from bench.processes import Child, free_port
from bench.system import Bench, LatencyFigure, RunFigure, latency_run, replay_run, throughput_run
from bench.world import CallMaker

__all__ = [
    "RunSize",
    "answered_by",
    "run_timeout",
    "start_worker",
    "worker_child",
    "worker_latency",
    "worker_replay",
    "worker_run",
]


class RunSize(Protocol):
    """How many calls a throughput run counts, after how many of warm-up (the bench's
    `Config`, a phase's plan)."""

    @property
    def calls(self) -> int: ...

    @property
    def warmup(self) -> int: ...


def run_timeout(calls: int) -> float:
    """Generous: a phase that takes this long is broken, not slow."""
    return max(120.0, calls / 20)


def worker_child(
    bench: Bench, name: str, database_url: str | None = None, env: Mapping[str, str] | None = None
) -> tuple[Child, int]:
    """A worker not started yet, and its metrics port. `env`: more of the worker's environment
    (the tracing phase's OTEL_*, the cluster's URLs)."""
    port = free_port()
    child = bench.child(
        name,
        "ltm",
        "worker",
        env=bench.services.env(
            LTM_METRICS_PORT=str(port),
            LTM_DATABASE_URL=database_url or bench.services.database_url,
            **(env or {}),
        ),
    )
    return child, port


async def start_worker(
    bench: Bench, name: str, database_url: str | None = None, env: Mapping[str, str] | None = None
) -> Child:
    """A worker started and ready (its `/readyz` answers 200)."""
    child, port = worker_child(bench, name, database_url, env)
    child.start()
    await child.wait_http_ok(f"http://127.0.0.1:{port}/readyz")
    return child


async def answered_by(
    bench: Bench,
    size: RunSize,
    calls: CallMaker,
    consumer: Child,
    *,
    prepublished: bool,
    database_url: str | None = None,
    meter: CpuMeter | None = None,
) -> RunFigure:
    """`size.calls` calls answered by `consumer`, driven alike for every consumer compared."""
    return await throughput_run(
        bench,
        consumer.name.replace("-", ""),
        calls,
        calls=size.calls,
        warmup=0 if prepublished else size.warmup,
        timeout=run_timeout(size.calls),
        consumer=consumer,
        prepublished=prepublished,
        database_url=database_url,
        meter=meter,
    )


async def worker_run(
    bench: Bench,
    size: RunSize,
    calls: CallMaker,
    name: str,
    *,
    prepublished: bool,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
    metered: bool = False,
) -> tuple[RunFigure, float]:
    """A fresh worker process answering `size.calls` calls: its figure and peak RSS.
    `metered`: the figure holds the worker's CPU per call (not for a prepublished run, whose
    worker starts within it)."""
    if prepublished:
        worker, _ = worker_child(bench, name, database_url, env)  # started once the queue is full
    else:
        worker = await start_worker(bench, name, database_url, env)
    meter = CpuMeter({"worker": [worker.pid]}) if metered and not prepublished else None
    try:
        figure = await answered_by(
            bench,
            size,
            calls,
            worker,
            prepublished=prepublished,
            database_url=database_url,
            meter=meter,
        )
        return figure, worker.peak_rss_mb()
    finally:
        await worker.terminate()


async def worker_replay(
    bench: Bench, calls: CallMaker, name: str, *, letters: int
) -> tuple[RunFigure, float]:
    """A fresh worker answering `letters` dead-lettered calls that `ltm dlq replay --all
    --rate 0` sends back to it: its figure and peak RSS."""
    worker = await start_worker(bench, name)
    try:
        figure = await replay_run(
            bench,
            name.replace("-", ""),
            calls,
            letters=letters,
            timeout=run_timeout(letters),
            consumer=worker,
        )
        return figure, worker.peak_rss_mb()
    finally:
        await worker.terminate()


async def worker_latency(
    bench: Bench,
    calls: CallMaker,
    name: str,
    *,
    rate: float,
    seconds: float,
    warmup: int,
    env: Mapping[str, str] | None = None,
) -> tuple[LatencyFigure, float]:
    """A fresh worker's publish-to-result latency at `rate` calls/s: the figure, its peak RSS."""
    worker = await start_worker(bench, name, env=env)
    try:
        figure = await latency_run(
            bench,
            calls,
            rate=rate,
            seconds=seconds,
            warmup=warmup,
            timeout=run_timeout(round(rate * seconds)),
        )
        return figure, worker.peak_rss_mb()
    finally:
        await worker.terminate()
