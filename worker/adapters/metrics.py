"""Prometheus metrics of the worker, and its `/metrics`, `/healthz` and `/readyz` endpoints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["WorkerMetrics", "serve_metrics"]


@dataclass
class WorkerMetrics:
    """One registry per worker, so that several workers in one process (tests) do not clash."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.calls = Counter(
            "ltm_tool_calls_total",
            "Tool calls answered, by status (replayed: answered from the idempotency record).",
            ["status", "replayed"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ltm_tool_call_seconds",
            "From delivery to ack, per tool call.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "ltm_tool_calls_in_flight", "Deliveries being processed.", registry=self.registry
        )
        self.outbox_backlog = Gauge(
            "ltm_outbox_backlog", "Outbox rows not yet published.", registry=self.registry
        )
        self.dead_lettered = Counter(
            "ltm_dead_lettered_total",
            "Tool calls sent to the dead-letter queue, by cause.",
            ["cause"],
            registry=self.registry,
        )
        self.outbox_swept = Counter(
            "ltm_outbox_swept_total",
            "Outbox rows published by the sweep (left behind by a crash or a lost broker).",
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "ltm_transaction_calls",
            "Tool calls per database transaction.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )
        self.db_retries = Counter(
            "ltm_db_retries_total", "Transient database faults retried.", registry=self.registry
        )


async def serve_metrics(
    metrics: WorkerMetrics, port: int, *, ready: Callable[[], bool], host: str = "127.0.0.1"
) -> web.AppRunner:
    """Starts the endpoints; the caller cleans the runner up. Port 0 picks a free port.

    `host`: loopback unless the deployment says otherwise (`LTM_METRICS_HOST`)."""

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        is_ready = ready()
        return web.json_response(
            {"status": "ready" if is_ready else "not ready"}, status=200 if is_ready else 503
        )

    app = web.Application()
    app.add_routes(
        [
            web.get("/metrics", metrics_page),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
        ]
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
