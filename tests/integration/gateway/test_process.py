"""`run_gateway` as a process runs it (console mode, signals, draining) and a bot embedding."""

from __future__ import annotations

import asyncio
import base64
import os
import signal

import hikari
import pytest
from aio_pika.abc import AbstractChannel
from pydantic import SecretStr

from contracts import Topology
from gateway import Gateway, run_gateway
from infra.settings import Settings
from infra.topology import declare_shard_queue
from tests.integration.gateway.conftest import (
    FAST_RETRIES,
    SHARD_COUNT,
    embed_requested,
    fresh_shard,
    publish_embed,
    queue_depth,
    until,
)
from tests.support.fake_discord import FakeDiscord, Reply, random_snowflake


async def test_console_mode_prints_embeds_without_a_token(
    settings: Settings,
    channel: AbstractChannel,
    topology: Topology,
    capsys: pytest.CaptureFixture[str],
) -> None:
    console_settings = settings.model_copy(update={"discord_token": None})
    shard = fresh_shard()
    await declare_shard_queue(channel, topology, shard)
    event = embed_requested(shard, title="Console title", description="Alice likes tea")
    stop = asyncio.Event()
    run = asyncio.create_task(
        run_gateway(console_settings, (shard,), SHARD_COUNT, stop=stop, instance="console-test")
    )
    printed: list[str] = []

    def shown() -> bool:
        printed.append(capsys.readouterr().out)
        return "Alice likes tea" in "".join(printed)

    try:
        await publish_embed(channel, topology, event)
        await until(shown, what="the embed printed")
    finally:
        stop.set()
        assert await asyncio.wait_for(run, 10) == 0
    output = "".join(printed)
    assert "Console title" in output
    assert "| Alice likes tea" in output  # not a terminal: a plain bar, no ANSI codes
    assert "Manage server memories with /memory server" in output
    assert "\x1b[" not in output
    assert await queue_depth(channel, topology.shard_queue(shard)) == 0


async def test_sigterm_stops_after_in_flight_deliveries_finish(
    settings: Settings,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    process_settings = settings.model_copy(
        update={
            "discord_token": SecretStr("fake-token-process"),
            "discord_api_url": fake_discord.url.removesuffix("/api/v10"),  # added by the gateway
        }
    )
    shard = fresh_shard()
    await declare_shard_queue(channel, topology, shard)
    event = embed_requested(shard)
    fake_discord.script(event.channel_id, Reply.slow_success(1.0))
    run = asyncio.create_task(
        run_gateway(
            process_settings, (shard,), SHARD_COUNT, max_retries=0, retry_policy=FAST_RETRIES
        )
    )
    await publish_embed(channel, topology, event)
    await until(lambda: event.channel_id in fake_discord.arrived, what="the POST in flight")
    assert not fake_discord.messages_in(event.channel_id)  # still being answered
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(run, 15) == 0
    [post] = fake_discord.posts(event.channel_id)
    assert post.headers["Authorization"] == "Bot fake-token-process"
    assert len(fake_discord.messages_in(event.channel_id)) == 1
    assert await queue_depth(channel, topology.shard_queue(shard)) == 0  # acknowledged


def _plausible_token() -> str:
    """GatewayBot checks that a token's first part is the base64 of a bot id."""
    bot_id = base64.b64encode(str(random_snowflake()).encode()).decode().rstrip("=")
    return f"{bot_id}.fake.token"


async def test_a_bot_starts_and_stops_its_gateway(
    settings: Settings, fake_discord: FakeDiscord
) -> None:
    bot = hikari.GatewayBot(
        _plausible_token(), banner=None, logs=None, rest_url=fake_discord.url, max_retries=0
    )
    shard = fresh_shard()
    gateway = Gateway.for_bot(bot, settings, shards=(shard,), shard_count=SHARD_COUNT)
    assert not gateway.is_running
    await bot.dispatch(bot.event_factory.deserialize_starting_event(), return_tasks=True)
    try:
        assert gateway.is_running
        assert gateway.shard_consumer.shards == (shard,)
        await bot.dispatch(bot.event_factory.deserialize_started_event(), return_tasks=True)
        assert gateway.tool_client.shards == {shard}
    finally:
        await bot.dispatch(bot.event_factory.deserialize_stopping_event(), return_tasks=True)
    assert not gateway.is_running
