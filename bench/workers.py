"""Worker processes of the bench: `python -m worker.cli worker`, each with a metrics port of
its own, started on the services of a `Bench` (the machine's broker, or a cluster's)."""

from __future__ import annotations

from collections.abc import Mapping

from bench.processes import Child, free_port
from bench.system import Bench

__all__ = ["run_timeout", "start_worker", "worker_child"]


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
        "worker.cli",
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
