"""`run_gateway` as a process runs it (console mode, signals, draining) and a bot embedding."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import signal
import socket
from pathlib import Path

import hikari
import pytest
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from pydantic import SecretStr

from contracts import CacheInvalidate, Topology, cache_routing_key
from gateway import ConsoleSender, Gateway, run_gateway
from harness import services as support
from harness.broker import queue_depth
from harness.fake_discord import FakeDiscord, Reply
from harness.gateway import FAST_RETRIES
from harness.processes import LtmProcess
from harness.snowflake import snowflake
from harness.waiting import eventually
from infra.messaging.topology import declare_shard_queue
from infra.observability.metrics import MetricsPortInUse
from infra.settings import Settings
from tests.integration.gateway.conftest import (
    SHARD_COUNT,
    GatewayFactory,
    embed_requested,
    fresh_shard,
    handled,
    publish,
    publish_embed,
    publish_result,
    tool_call_completed,
    until,
)


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
    bot_id = base64.b64encode(snowflake().encode()).decode().rstrip("=")
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


async def test_the_gateway_recovers_when_the_broker_drops_its_connection(
    services: support.TestServices,
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    if services.vhost is None:
        pytest.skip("needs rabbitmqctl and a virtual host of our own")
    vhost = services.vhost
    shard = fresh_shard()
    async with start_gateway(shards=(shard,), reconnect_interval_s=0.5) as gateway:
        before = embed_requested(shard)
        await publish_embed(channel, topology, before)
        await handled(gateway, before, what="first embed")

        closed = await asyncio.to_thread(_close_connection, vhost, gateway.connection_name)
        assert closed, "the gateway's connection was not found"
        await eventually(
            lambda: asyncio.to_thread(_has_connection, vhost, gateway.connection_name),
            timeout=15,
            what="the gateway reconnected",
        )

        after = embed_requested(shard)
        await publish_embed(channel, topology, after)
        await handled(gateway, after, what="after reconnect")
        # The cache queue was declared again (exclusive queues die with their connection).
        key = snowflake()
        gateway.caches.user.set(key, "cached")
        await publish(
            channel,
            topology,
            CacheInvalidate(cache="user", key=key),
            cache_routing_key("user", key),
            expiration_s=None,
        )
        await until(lambda: gateway.caches.user.get(key) is None, what="invalidation received")
    assert len(fake_discord.posts(after.channel_id)) == 1


def _has_connection(vhost: str, name: str) -> bool:
    return bool(support.connection_pids(vhost, name))


def _close_connection(vhost: str, name: str) -> bool:
    pids = support.connection_pids(vhost, name)
    for pid in pids:
        support.rabbitmqctl("close_connection", pid, "test: broker drops the gateway")
    return bool(pids)


async def test_a_shared_connection_stays_open_after_the_gateway_stops(
    settings: Settings, amqp: AbstractRobustConnection
) -> None:
    stream = io.StringIO()
    gateway = Gateway(
        settings,
        sender=ConsoleSender(stream),
        shards=(fresh_shard(),),
        shard_count=SHARD_COUNT,
        connection=amqp,
    )
    async with gateway:
        assert gateway.is_running
    assert not gateway.is_running
    assert not amqp.is_closed
    still_usable = await amqp.channel()
    await still_usable.close()


async def test_a_gateway_process_serves_its_metrics(
    services: support.TestServices,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    tmp_path: Path,
) -> None:
    shard = fresh_shard()
    posted, forbidden = embed_requested(shard), embed_requested(shard)
    fake_discord.always(forbidden.channel_id, Reply.forbidden())
    result = tool_call_completed(f"call_{snowflake()}", shard)
    invalidation = CacheInvalidate(cache="user", key=snowflake())
    args = ("gateway", "--shards", str(shard), "--shard-count", str(SHARD_COUNT))
    env = {"DISCORD_TOKEN": "fake-token-process", "DISCORD_API_URL": fake_discord.url}
    expected = {
        'ltm_gateway_embeds_total{outcome="sent"} 1.0',
        'ltm_gateway_embeds_total{outcome="dropped"} 1.0',
        'ltm_gateway_embed_failures_total{cause="forbidden"} 1.0',
        'ltm_gateway_results_total{waiting="false"} 1.0',
        'ltm_gateway_cache_invalidations_total{cache="user",held="false"} 1.0',
    }
    with LtmProcess(services, args, tmp_path / "gateway.log", env=env) as gateway:
        await gateway.wait_ready_async()  # its /readyz answers 200
        for embed in (posted, forbidden):
            await publish_embed(channel, topology, embed)
        await publish_result(channel, topology, result)
        await publish(channel, topology, invalidation, cache_routing_key("user", invalidation.key))

        async def counted() -> bool:
            return expected <= set((await gateway.metrics()).splitlines())

        await eventually(counted, what=f"{expected} on the gateway's /metrics")
        page = await gateway.metrics()
        assert await asyncio.to_thread(gateway.terminate) == 0
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("process_resident_memory_bytes ") for line in samples)
    assert [line for line in samples if "_created" in line.split(" ")[0]] == []
    assert len(fake_discord.messages_in(posted.channel_id)) == 1


async def test_a_gateway_on_a_metrics_port_in_use_names_its_setting(settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        in_use = settings.model_copy(update={"gateway_metrics_port": port, "discord_token": None})
        with pytest.raises(MetricsPortInUse) as raised:
            await run_gateway(in_use, (fresh_shard(),), SHARD_COUNT)
    assert str(raised.value) == (
        f"metrics port {port} is in use: set LTM_GATEWAY_METRICS_PORT to another port,"
        " or 0 to turn the endpoint off"
    )
