"""The endpoints listen on the loopback address unless the settings say otherwise."""

from __future__ import annotations

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from infra.observability.metrics import serve_metrics
from infra.settings import Settings


def _addresses(runner: web.AppRunner) -> list[str]:
    return [str(address[0]) for address in runner.addresses]


async def _serve(host: str) -> web.AppRunner:
    return await serve_metrics(
        CollectorRegistry(), host=host, port=0, ready=lambda: True, port_setting="TEST_PORT"
    )


async def test_the_default_host_is_127_0_0_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LTM_METRICS_HOST", raising=False)
    runner = await _serve(Settings().metrics_host)
    try:
        assert _addresses(runner) == ["127.0.0.1"]
    finally:
        await runner.cleanup()


async def test_another_host_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LTM_METRICS_HOST", "0.0.0.0")
    runner = await _serve(Settings().metrics_host)
    try:
        assert _addresses(runner) == ["0.0.0.0"]
    finally:
        await runner.cleanup()
