"""The HTTP endpoint of every long-running process (`/metrics`, `/healthz`, `/readyz`), and the
registry its metrics live in, which holds the process's own too (`process_*`: RSS, CPU)."""

from __future__ import annotations

import errno
from collections.abc import Callable

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

__all__ = ["MetricsPortInUse", "process_registry", "serve_metrics"]


class MetricsPortInUse(OSError):
    """Another process (often a second worker on the host) serves on the port already."""

    def __init__(self, port: int, setting: str) -> None:
        super().__init__(
            errno.EADDRINUSE,
            f"metrics port {port} is in use: set {setting} to another port, "
            "or 0 to turn the endpoint off",
        )

    def __str__(self) -> str:
        return str(self.strerror)


def process_registry() -> CollectorRegistry:
    """A registry for one process's metrics, with its memory, CPU time and open files
    (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...; read on Linux)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


async def serve_metrics(
    registry: CollectorRegistry,
    *,
    host: str,
    port: int,
    ready: Callable[[], bool],
    port_setting: str,
) -> web.AppRunner:
    """Starts the endpoints; the caller cleans the runner up. Port 0 picks a free port.

    `port_setting` names the setting of the port, for the error when it is taken: a process
    without its endpoint would be invisible to monitoring and to its supervisor's readiness
    probe, so it does not start (`MetricsPortInUse`).
    """
    # Each counter's and histogram's creation time is a series of its own that a scraping
    # Prometheus has no use for. prometheus_client reads this switch when it renders a page.
    disable_created_metrics()  # type: ignore[no-untyped-call]

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
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
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        if error.errno == errno.EADDRINUSE:
            raise MetricsPortInUse(port, port_setting) from None
        raise
    return runner
