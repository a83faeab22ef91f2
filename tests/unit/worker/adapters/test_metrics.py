"""The worker's endpoints listen on the loopback address unless told otherwise."""

from __future__ import annotations

import pytest

from worker.adapters.metrics import WorkerMetrics, serve_metrics


def _addresses(runner: object) -> list[str]:
    return [str(address[0]) for address in runner.addresses]  # type: ignore[attr-defined]


async def test_metrics_listen_on_127_0_0_1_by_default() -> None:
    runner = await serve_metrics(WorkerMetrics(), 0, ready=lambda: True)
    try:
        assert _addresses(runner) == ["127.0.0.1"]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.2"])
async def test_metrics_listen_where_told(host: str) -> None:
    runner = await serve_metrics(WorkerMetrics(), 0, ready=lambda: True, host=host)
    try:
        assert _addresses(runner) == [host]
    finally:
        await runner.cleanup()
