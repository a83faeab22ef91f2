"""An in-process gateway of a chaos run: it consumes the shard queues and posts each embed to
the fake Discord, as the bot's gateway would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import hikari

from gateway import DiscordSender, Gateway, RetryPolicy
from harness.fake_discord import FakeDiscord
from infra.settings import Settings

__all__ = ["running_gateway"]


@asynccontextmanager
async def running_gateway(
    settings: Settings, fake: FakeDiscord, shards: Sequence[int], shard_count: int
) -> AsyncIterator[Gateway]:
    """A started gateway for `shards`, posting to `fake`; stopped when the block ends."""
    app = hikari.RESTApp(url=fake.url, max_retries=0)
    await app.start()
    try:
        async with app.acquire("fake-token-chaos", "Bot") as rest:
            gateway = Gateway(
                settings,
                sender=DiscordSender(
                    rest, policy=RetryPolicy(retry_for_s=5.0, first_wait_s=0.05, max_wait_s=0.2)
                ),
                shards=shards,
                shard_count=shard_count,
                reconnect_interval_s=0.5,
            )
            await gateway.start()
            try:
                yield gateway
            finally:
                await gateway.stop(grace_s=5.0)
    finally:
        await app.close()
