"""An in-process gateway posting to the fake Discord, as the bot's would: for the tests and
the chaos runs alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import hikari
from hikari.impl import GatewayShardImpl

from gateway import DiscordSender, Gateway, RetryPolicy
from harness.fake_discord import FakeDiscord
from infra.settings import Settings

__all__ = ["FAST_RETRIES", "running_gateway", "unconnected_shard"]

# Retries that give up within a test's patience.
FAST_RETRIES = RetryPolicy(retry_for_s=5.0, first_wait_s=0.05, max_wait_s=0.2)


@asynccontextmanager
async def running_gateway(
    settings: Settings,
    fake: FakeDiscord,
    *,
    shards: Sequence[int],
    shard_count: int,
    token: str = "fake-token",
    policy: RetryPolicy = FAST_RETRIES,
    stop_grace_s: float = 5.0,
    **options: Any,
) -> AsyncIterator[Gateway]:
    """A started gateway for `shards`, posting to `fake` (`options` go to `Gateway`);
    stopped when the block ends."""
    app = hikari.RESTApp(url=fake.url, max_retries=0)
    await app.start()
    try:
        async with app.acquire(token, "Bot") as rest:
            gateway = Gateway(
                settings,
                sender=DiscordSender(rest, policy=policy),
                shards=tuple(shards),
                shard_count=shard_count,
                **options,
            )
            await gateway.start()
            try:
                yield gateway
            finally:
                await gateway.stop(grace_s=stop_grace_s)
    finally:
        await app.close()


def unconnected_shard(
    bot: hikari.GatewayBot, shard_id: int = 0, shard_count: int = 1
) -> GatewayShardImpl:
    """A real shard of `bot` for the events a test dispatches to name; it never connects."""
    return GatewayShardImpl(
        intents=bot.intents,
        http_settings=bot.http_settings,
        proxy_settings=bot.proxy_settings,
        event_manager=bot.event_manager,
        event_factory=bot.event_factory,
        token="fake",
        url="wss://gateway.invalid",
        shard_id=shard_id,
        shard_count=shard_count,
    )
