"""A gateway process of its own (`ltm gateway`): REST only, until SIGTERM or SIGINT.

`run_gateway(settings, shards, shard_count)` sends embeds through `open_sender` (hikari's
`RESTApp` with a bot token, or the terminal without one), serves `/metrics`, `/healthz` and
`/readyz` on `LTM_GATEWAY_METRICS_PORT`, and on a signal stops consuming, lets in-flight
deliveries finish, closes, and returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import hikari

from gateway.app import Gateway
from gateway.console import ConsoleSender
from gateway.delivery import EmbedSender
from gateway.discord_sender import DiscordSender, RetryPolicy
from gateway.metrics import GatewayMetrics
from infra.observability.logs import get_logger
from infra.observability.metrics import serve_metrics
from infra.settings import Settings

__all__ = ["open_sender", "run_gateway"]

log = get_logger("gateway.app")


def _rest_url(settings: Settings) -> str | None:
    """`DISCORD_API_URL`, with the `/api/v10` hikari needs added when only a host is given."""
    url = settings.discord_api_url
    if not url:
        return None
    url = url.rstrip("/")
    return url if "/api/v" in url else f"{url}/api/v10"


@asynccontextmanager
async def open_sender(
    settings: Settings,
    *,
    max_retries: int = 3,
    retry_policy: RetryPolicy | None = None,
    metrics: GatewayMetrics | None = None,
) -> AsyncIterator[EmbedSender]:
    """A `DiscordSender` over its own `hikari.RESTApp` when `DISCORD_TOKEN` is set, else the
    console. `max_retries`: hikari's own retries of a 5xx (0..5; tests use 0); `metrics`: where
    the sender counts failures by cause."""
    if settings.discord_token is None:
        log.info("gateway.console_mode")
        yield ConsoleSender()
        return
    app = hikari.RESTApp(url=_rest_url(settings), max_retries=max_retries)
    await app.start()
    try:
        async with app.acquire(settings.discord_token.get_secret_value(), "Bot") as rest:
            yield DiscordSender(rest, policy=retry_policy, metrics=metrics)
    finally:
        await app.close()


async def run_gateway(
    settings: Settings,
    shards: tuple[int, ...],
    shard_count: int,
    *,
    stop: asyncio.Event | None = None,
    max_retries: int = 3,
    retry_policy: RetryPolicy | None = None,
    instance: str | None = None,
) -> int:
    """Runs a gateway process for `shards` until SIGTERM or SIGINT (or `stop` is set), with
    its endpoints on `LTM_GATEWAY_METRICS_PORT` (none when 0).

    Returns 0 after a clean stop. The keyword arguments are for tests and tools.
    """
    if not shards:
        raise ValueError("a gateway process needs at least one shard")
    stop_event = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop_event.set)
            handled.append(signum)
    metrics = GatewayMetrics()
    gateway: Gateway | None = None
    endpoint = None
    try:
        if settings.gateway_metrics_port:
            # Before connecting: a port in use fails the start at once, with the setting named.
            endpoint = await serve_metrics(
                metrics.registry,
                host=settings.metrics_host,
                port=settings.gateway_metrics_port,
                ready=lambda: gateway is not None and gateway.ready,
                port_setting="LTM_GATEWAY_METRICS_PORT",
            )
        async with open_sender(
            settings, max_retries=max_retries, retry_policy=retry_policy, metrics=metrics
        ) as sender:
            gateway = Gateway(
                settings,
                sender=sender,
                shards=shards,
                shard_count=shard_count,
                instance=instance,
                metrics=metrics,
            )
            await gateway.start()
            try:
                await stop_event.wait()
                log.info("gateway.stopping", shards=list(shards))
            finally:
                await gateway.stop()
    finally:
        if endpoint is not None:
            await endpoint.cleanup()
        for signum in handled:
            loop.remove_signal_handler(signum)
    return 0
