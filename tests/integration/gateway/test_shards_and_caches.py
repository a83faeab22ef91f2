"""Two gateway processes: each gets only its own shards' messages, both get every invalidation."""

from __future__ import annotations

import io

import aio_pika
import aio_pika.exceptions
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from contracts import CacheInvalidate, CacheName, Topology, cache_routing_key
from gateway import ConsoleSender, Gateway
from harness.fake_discord import FakeDiscord
from harness.snowflake import snowflake
from harness.waiting import eventually
from infra.settings import Settings
from tests.integration.gateway.conftest import (
    SHARD_COUNT,
    GatewayFactory,
    embed_requested,
    fresh_shard,
    publish,
    publish_embed,
    publish_result,
    tool_call_completed,
    until,
)


async def test_each_instance_gets_only_its_own_shard(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    async with (
        start_gateway(shards=(0,), shard_count=2, token="token-of-a") as a,
        start_gateway(shards=(1,), shard_count=2, token="token-of-b") as b,
    ):
        embeds = {shard: [embed_requested(shard) for _ in range(3)] for shard in (0, 1)}
        results = {
            shard: [tool_call_completed(f"call_{snowflake()}", shard) for _ in range(3)]
            for shard in (0, 1)
        }
        for shard in (0, 1):
            for embed in embeds[shard]:
                await publish_embed(channel, topology, embed)
            for result in results[shard]:
                await publish_result(channel, topology, result)
        expected = {
            shard: {event.event_id for event in (*embeds[shard], *results[shard])}
            for shard in (0, 1)
        }
        await until(lambda: all(i in a.shard_consumer.seen for i in expected[0]), what="A's")
        await until(lambda: all(i in b.shard_consumer.seen for i in expected[1]), what="B's")
        assert not any(i in a.shard_consumer.seen for i in expected[1])
        assert not any(i in b.shard_consumer.seen for i in expected[0])

    for shard, token in ((0, "token-of-a"), (1, "token-of-b")):
        for embed in embeds[shard]:
            [post] = fake_discord.posts(embed.channel_id)
            assert post.headers["Authorization"] == f"Bot {token}"


async def test_shards_given_to_start_add_to_those_given_before(settings: Settings) -> None:
    first, second = fresh_shard(), fresh_shard()
    gateway = Gateway(
        settings,
        sender=ConsoleSender(io.StringIO()),
        shards=(first,),
        shard_count=SHARD_COUNT,
    )
    await gateway.start(shards=(second,))
    try:
        assert gateway.shards == (first, second)
        assert gateway.shard_consumer.shards == (first, second)
        assert gateway.tool_client.shards == {first, second}
    finally:
        await gateway.stop()


async def test_every_instance_drops_the_invalidated_entry(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    guild, other_guild, user = (snowflake() for _ in range(3))
    async with (
        start_gateway(shards=(fresh_shard(),)) as a,
        start_gateway(shards=(fresh_shard(),)) as b,
    ):
        assert a.cache_queue != b.cache_queue
        heard: list[tuple[str, str]] = []
        b.caches.add_listener(lambda cache, key: heard.append((cache, key)))
        for gateway in (a, b):
            gateway.caches.persona_state.set(guild, {"persona": "Tomori"})
            gateway.caches.persona_state.set(other_guild, {"persona": "Tomori"})
            gateway.caches.user.set(user, {"privacy_level": 2})

        invalidations: tuple[tuple[CacheName, str], ...] = (
            ("persona_state", guild),
            ("user", user),
        )
        for cache, key in invalidations:
            event = CacheInvalidate(cache=cache, key=key, tool_call_id=f"call_{snowflake()}")
            await publish(
                channel, topology, event, cache_routing_key(cache, key), expiration_s=None
            )

        def dropped(gateway: Gateway) -> bool:
            return (
                gateway.caches.persona_state.get(guild) is None
                and gateway.caches.user.get(user) is None
            )

        await until(lambda: dropped(a) and dropped(b), what="entries dropped in both")
        for gateway in (a, b):
            assert gateway.caches.persona_state.get(other_guild) == {"persona": "Tomori"}
        await until(lambda: len(heard) == 2, what="listener told")
        assert heard == [("persona_state", guild), ("user", user)]


async def test_the_cache_queue_goes_away_with_its_process(
    start_gateway: GatewayFactory, amqp: AbstractRobustConnection
) -> None:
    async with start_gateway(shards=(fresh_shard(),)) as gateway:
        name = gateway.cache_queue
        assert await _queue_exists(amqp, name)
    await eventually(lambda: _queue_gone(amqp, name), timeout=15, what="cache queue deleted")


async def _queue_exists(amqp: AbstractRobustConnection, name: str) -> bool:
    channel = await amqp.channel()
    try:
        await channel.declare_queue(name, passive=True)
        return True
    except aiormq.exceptions.ChannelLockedResource:
        return True  # exclusive to the gateway's connection: it exists
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return False
    finally:
        if not channel.is_closed:
            await channel.close()


async def _queue_gone(amqp: AbstractRobustConnection, name: str) -> bool:
    return not await _queue_exists(amqp, name)
